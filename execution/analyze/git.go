package analyze

import "strings"

// gitReadOnlySubcommands only inspect the repository, whatever their
// arguments (apart from --output, checked separately).
var gitReadOnlySubcommands = set(
	"status", "log", "diff", "show", "rev-parse", "ls-files", "ls-tree", "blame",
	"grep", "describe", "cat-file", "shortlog", "rev-list", "show-ref",
	"merge-base", "name-rev", "for-each-ref", "diff-tree", "diff-index",
	"diff-files", "check-ignore", "check-attr", "count-objects", "version",
	"whatchanged", "annotate", "show-branch", "cherry", "range-diff", "ls-remote",
)

// gitGlobalFlags are global options without a value.
var gitGlobalFlags = set(
	"--no-pager", "-p", "--paginate", "-P", "--bare", "--no-replace-objects",
	"--literal-pathspecs", "--glob-pathspecs", "--noglob-pathspecs",
	"--icase-pathspecs", "--no-optional-locks", "--no-lazy-fetch", "--no-advice",
	"--version", "--help", "--html-path", "--man-path", "--info-path", "--exec-path",
)

// gitRiskyConfig are fragments of configuration keys whose values name
// programs git may run (pagers, diff drivers, hooks, ...). Setting one with
// -c turns even "git log" into running arbitrary commands.
var gitRiskyConfig = []string{
	"pager", "fsmonitor", "external", "command", "textconv", "program", "hook",
	"editor", "askpass", "alias", "helper", "proxy", "filter.", "driver",
	"include", "uploadpack", "receivepack",
}

func checkGit(w *walker, name string, args []arg) {
	i := 0
	for ; i < len(args); i++ {
		t := args[i].text
		if !strings.HasPrefix(t, "-") {
			break
		}
		switch {
		case t == "-C" || t == "--git-dir" || t == "--work-tree" || t == "--namespace":
			i++
		case hasAnyPrefix(t, "--git-dir=", "--work-tree=", "--namespace="):
		case t == "-c":
			i++
			if i < len(args) {
				w.gitConfigOverride(args[i])
			}
		case gitGlobalFlags[t]:
		default:
			// Includes --exec-path=DIR and --config-env, which change
			// which programs git runs.
			w.add(Mutating, "git option %q is not known to be read-only", shorten(t))
		}
	}
	if i >= len(args) {
		return // no subcommand: git only prints usage or version
	}
	sub := args[i]
	if !sub.static {
		w.add(Complex, "dynamic git subcommand %q", sub.display())
		return
	}
	rest := args[i+1:]
	if !gitReadOnly(sub.text, rest) {
		w.add(Mutating, "%q is not known to be read-only", shorten("git "+sub.text))
		return
	}
	for _, a := range rest {
		if a.text == "--output" || strings.HasPrefix(a.text, "--output=") {
			w.add(Mutating, `"git %s --output" writes a file`, sub.text)
		}
		if sub.text == "grep" && (strings.HasPrefix(a.text, "-O") || strings.HasPrefix(a.text, "--open-files-in-pager")) {
			w.add(Mutating, `"git grep -O" runs a program`)
		}
	}
}

func (w *walker) gitConfigOverride(v arg) {
	key, _, ok := strings.Cut(v.text, "=")
	if !ok && !v.static {
		w.add(Mutating, "git -c %q cannot be checked", v.display())
		return
	}
	key = strings.ToLower(key)
	for _, r := range gitRiskyConfig {
		if strings.Contains(key, r) {
			w.add(Mutating, "git -c %q may run a program", shorten(key))
			return
		}
	}
}

func gitReadOnly(sub string, args []arg) bool {
	if gitReadOnlySubcommands[sub] {
		return true
	}
	first := ""
	if len(args) > 0 && args[0].static {
		first = args[0].text
	}
	switch sub {
	case "branch":
		return gitListing(args, "arvl", false, set("-a", "-r", "-v", "-vv", "--all", "--remotes", "--verbose",
			"--show-current", "--no-color", "--color", "--column", "--no-column", "-i", "--ignore-case",
			"--omit-empty", "--no-abbrev"))
	case "tag":
		return len(args) == 0 || gitListing(args, "l", true, set("--column", "--no-column", "-i", "--ignore-case",
			"--color", "--no-color", "--omit-empty"))
	case "remote":
		for len(args) > 0 && (args[0].text == "-v" || args[0].text == "--verbose") {
			args = args[1:]
		}
		return len(args) == 0 || (args[0].static && (args[0].text == "get-url" || args[0].text == "show"))
	case "config":
		return gitConfigReadOnly(args)
	case "stash":
		return first == "list" || first == "show"
	case "reflog":
		return len(args) == 0 || first == "show" || first == "exists" || strings.HasPrefix(first, "-")
	case "worktree":
		return first == "list"
	}
	return false
}

// gitCommitFilters take an optional commit as the next word.
var gitCommitFilters = set("--contains", "--no-contains", "--merged", "--no-merged", "--points-at")

// gitListing reports whether branch or tag arguments only list refs:
// known listing flags, and operands only as patterns after -l/--list.
// letters are the short flags allowed in a cluster; nLists is set for
// "git tag -n", which lists tags with their messages.
func gitListing(args []arg, letters string, nLists bool, flags map[string]bool) bool {
	list, operands := false, 0
	for i := 0; i < len(args); i++ {
		t := args[i].text
		switch {
		case t == "--list" || t == "-l" || (nLists && strings.HasPrefix(t, "-n")):
			list = true
		case flags[t]:
		case hasAnyPrefix(t, "--color=", "--sort=", "--format=", "--column=", "--abbrev=",
			"--contains=", "--no-contains=", "--merged=", "--no-merged=", "--points-at="):
		case gitCommitFilters[t]:
			if i+1 < len(args) && !strings.HasPrefix(args[i+1].text, "-") {
				i++
			}
		case len(t) > 1 && t[0] == '-' && t[1] != '-' && strings.Trim(t[1:], letters) == "":
			if strings.Contains(t, "l") {
				list = true
			}
		case strings.HasPrefix(t, "-"):
			return false
		default:
			operands++
		}
	}
	return operands == 0 || list
}

var (
	gitConfigWrites = set("--unset", "--unset-all", "--add", "--replace-all", "--rename-section",
		"--remove-section", "--edit", "-e")
	gitConfigReads = set("--get", "--get-all", "--get-regexp", "--get-urlmatch", "--get-color",
		"--get-colorbool", "--list", "-l")
	gitConfigValued = set("-f", "--file", "--blob", "--type", "--default", "--comment")
)

func gitConfigReadOnly(args []arg) bool {
	read := false
	var operands []arg
	for i := 0; i < len(args); i++ {
		t := args[i].text
		switch {
		case gitConfigWrites[t]:
			return false
		case gitConfigReads[t]:
			read = true
		case gitConfigValued[t]:
			i++
		case strings.HasPrefix(t, "-"):
			// Scopes and output flags: --global, --show-origin, -z, ...
		default:
			operands = append(operands, args[i])
		}
	}
	if read {
		return true
	}
	if len(operands) > 0 && operands[0].static {
		switch operands[0].text {
		case "get", "list":
			return true
		case "set", "unset", "rename-section", "remove-section", "edit":
			return false
		}
	}
	// "git config NAME" with a single operand prints that value.
	return len(operands) == 1
}

func hasAnyPrefix(s string, prefixes ...string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
