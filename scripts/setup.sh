#!/usr/bin/env bash
# Installs what building and testing mevedel-exec needs, when it is missing:
# Debian packages through apt-get (when running as root; bubblewrap,
# package-lint, sudo, podman, runc and docker.io among them), the Eask CLI
# through npm, and the Go modules.
set -euo pipefail
cd "$(dirname "$0")/.."

need_pkgs=()
command -v bash >/dev/null || need_pkgs+=(bash)
command -v mount >/dev/null || need_pkgs+=(mount)
command -v git >/dev/null || need_pkgs+=(git)
command -v make >/dev/null || need_pkgs+=(make)
command -v emacs >/dev/null || need_pkgs+=(emacs-nox)
command -v npm >/dev/null || need_pkgs+=(npm)
# The remote tests start a private sshd; the panel test drives emacs -nw in tmux.
[ -x /usr/sbin/sshd ] || need_pkgs+=(openssh-server)
command -v ssh >/dev/null || need_pkgs+=(openssh-client)
command -v tmux >/dev/null || need_pkgs+=(tmux)
# Confinement of local commands (sandbox modes best-effort and required).
command -v bwrap >/dev/null || need_pkgs+=(bubblewrap)
# package-lint for `eask lint package'; the Eask file adds Debian's
# directory of Emacs packages, so Eask finds it without a network.
compgen -G '/usr/share/emacs/site-lisp/elpa/package-lint-[0-9]*' >/dev/null ||
  need_pkgs+=(elpa-package-lint)
# use-package (built in from Emacs 29): the install test runs the README's
# use-package snippet in a person's Emacs.
emacs --batch --eval '(kill-emacs (if (locate-library "use-package") 0 1))' >/dev/null 2>&1 ||
  need_pkgs+=(elpa-use-package)
# /sudo: targets are tested with the real sudo, /podman: with Podman
# running runc, /docker: with the docker command line (docker.io, whose
# engine the tests never start) against Podman's API service.
command -v sudo >/dev/null || need_pkgs+=(sudo)
command -v podman >/dev/null || need_pkgs+=(podman)
command -v docker >/dev/null || need_pkgs+=(docker.io)
{ [ -x /usr/sbin/runc ] || command -v runc >/dev/null; } || need_pkgs+=(runc)
if [ ${#need_pkgs[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: missing ${need_pkgs[*]}; install them (apt-get install ${need_pkgs[*]}) or run as root" >&2
    exit 1
  fi
  echo "setup: installing ${need_pkgs[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi

if ! command -v go >/dev/null; then
  if [ -x /usr/local/go/bin/go ]; then
    export PATH="/usr/local/go/bin:$PATH"
  else
    echo "setup: Go 1.26 or later is required (go.mod); install it and put go on PATH" >&2
    exit 1
  fi
fi
go mod download

# Eask runs the Emacs Lisp build and ERT suite.
if ! command -v eask >/dev/null; then
  echo "setup: installing the Eask CLI"
  npm install -g --silent @emacs-eask/cli >/dev/null
fi
