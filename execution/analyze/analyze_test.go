package analyze

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/mevedel/mevedel-exec/internal/shwords"
)

type testCase struct {
	src    string
	class  Class
	reason string // substring expected in one of the reasons; "" skips the check
}

var cases = []testCase{
	// Empty input and comments.
	{"", ReadOnly, ""},
	{"   \n\t ", ReadOnly, ""},
	{"# just a comment", ReadOnly, ""},

	// Backgrounding anywhere is refused.
	{"sleep 5 &", Refused, `background operator "&"`},
	{"sleep 5 & echo hi", Refused, `background operator "&"`},
	{"(sleep 1 &)", Refused, `background operator "&"`},
	{"{ sleep 1 & }", Refused, `background operator "&"`},
	{"if true; then sleep 1 & fi", Refused, `background operator "&"`},
	{"for i in 1 2; do sleep $i & done", Refused, `background operator "&"`},
	{"while true; do sleep 1 & break; done", Refused, `background operator "&"`},
	{"case x in x) sleep 1 & ;; esac", Refused, `background operator "&"`},
	{"echo $(sleep 1 &)", Refused, `background operator "&"`},
	{"echo `sleep 1 &`", Refused, `background operator "&"`},
	{"cat <(sleep 1 &)", Refused, `background operator "&"`},
	{"ls | sleep 1 &", Refused, `background operator "&"`},
	{"rm -rf x &", Refused, `background operator "&"`},
	{"sleep 1 &\necho 'unterminated", Refused, `background operator "&"`},
	{"x=${y:-$(sleep 1 &)}", Refused, `background operator "&"`},
	{"coproc cat", Refused, `"coproc"`},
	{"coproc worker { cat; }", Refused, `"coproc"`},
	{"nohup make", Refused, `"nohup" detaches a process`},
	{"setsid x", Refused, `"setsid" detaches a process`},
	{"disown -a", Refused, `"disown" detaches a process`},
	{"/usr/bin/nohup x", Refused, `"nohup"`},
	{`\nohup x`, Refused, `"nohup"`},
	{`"no"'hup' x`, Refused, `"nohup"`},
	{"echo $(nohup x)", Refused, `"nohup"`},
	{"f() { setsid x; }", Refused, `"setsid"`},
	{"ls && nohup x", Refused, `"nohup"`},
	{"env -i FOO=1 nohup x", Refused, `"nohup"`},
	{"env -u HOME -- nohup x", Refused, `"nohup"`},
	{"env -S 'FOO=1 nohup x'", Refused, `"nohup"`},
	{"command nohup x", Refused, `"nohup"`},
	{"builtin disown", Refused, `"disown"`},
	{"exec setsid x", Refused, `"setsid"`},
	{"sudo -u bob nohup x", Refused, `"nohup"`},
	{"sudo -E FOO=1 setsid x", Refused, `"setsid"`},
	{"sudo -b ls", Refused, `"sudo -b"`},
	{"nice -n 10 nohup x", Refused, `"nohup"`},
	{"nice nohup x", Refused, `"nohup"`},
	{"ionice -c3 nohup x", Refused, `"nohup"`},
	{"timeout -s KILL 5 nohup x", Refused, `"nohup"`},
	{"timeout 5s setsid x", Refused, `"setsid"`},
	{"stdbuf -oL nohup x", Refused, `"nohup"`},
	{"xargs -n1 -I{} nohup x {}", Refused, `"nohup"`},
	{"time nohup x", Refused, `"nohup"`},
	{"time -p nohup x", Refused, `"nohup"`},
	{"/usr/bin/time -v nohup x", Refused, `"nohup"`},
	{"chroot /srv nohup x", Refused, `"nohup"`},
	{"watch -n 1 nohup x", Refused, `"nohup"`},
	{"watch 'sleep 1 &'", Refused, `background operator "&"`},
	{"env nice timeout 5 command nohup x", Refused, `"nohup"`},
	{"bash -c 'sleep 1 &'", Refused, `background operator "&"`},
	{`sh -c "disown"`, Refused, `"disown"`},
	{"dash -c nohup", Refused, `"nohup"`},
	{"zsh -c 'ls; nohup x'", Refused, `"nohup"`},
	{"bash -lc 'setsid x'", Refused, `"setsid"`},
	{`bash -c "bash -c 'nohup x'"`, Refused, `"nohup"`},
	{"eval 'sleep 1 &'", Refused, `background operator "&"`},
	{"trap 'nohup x' EXIT", Refused, `"nohup"`},
	{"find . -exec nohup x {} ;", Refused, `"nohup"`},
	{"su -c 'nohup x' bob", Refused, `"nohup"`},
	{"bg %1", Refused, `"bg"`},
	{`echo "$(nohup x)"`, Refused, `"nohup"`},
	{"[[ -n $(nohup x) ]]", Refused, `"nohup"`},
	{"(( $(setsid y) ))", Refused, `"setsid"`},
	{"declare x=$(nohup y)", Refused, `"nohup"`},
	{"a=( $(nohup x) )", Refused, `"nohup"`},
	{"for x in $(nohup y); do :; done", Refused, `"nohup"`},
	{"cat <<EOF\n$(nohup x)\nEOF", Refused, `"nohup"`},
	{"ls > $(nohup x)", Refused, `"nohup"`},

	// Only command position counts, and && is not backgrounding.
	{"echo nohup", ReadOnly, ""},
	{"grep setsid file", ReadOnly, ""},
	{"echo '&' \"sleep 1 &\"", ReadOnly, ""},
	{"echo $((1 & 3))", ReadOnly, ""},
	{"ls &> /dev/null", ReadOnly, ""},
	{"command -v nohup", ReadOnly, ""},
	{"type setsid", ReadOnly, ""},
	{"a && b", Mutating, `"a" is not known to be read-only`},

	// Read-only commands and compositions.
	{"ls -la | grep foo | wc -l", ReadOnly, ""},
	{"cat README.md", ReadOnly, ""},
	{"head -n 20 file && tail -f log", ReadOnly, ""},
	{"rg -n 'func main' --type go", ReadOnly, ""},
	{"find . -name '*.go' -type f", ReadOnly, ""},
	{`find "$dir" -name x -print`, ReadOnly, ""},
	{"du -sh * | sort -h | tail -5", ReadOnly, ""},
	{"sort -u -k2,2 -t, file", ReadOnly, ""},
	{"uniq -c file", ReadOnly, ""},
	{"date +%Y-%m-%d", ReadOnly, ""},
	{"date -u -d yesterday '+%s'", ReadOnly, ""},
	{"env", ReadOnly, ""},
	{"env FOO=1 ls", ReadOnly, ""},
	{"hostname", ReadOnly, ""},
	{"xxd file", ReadOnly, ""},
	{"xxd -l 64 file -", ReadOnly, ""},
	{"jq '.items[] | .name' data.json", ReadOnly, ""},
	{"sed -n '1,20p' file", ReadOnly, ""},
	{"sed 's/world/there/g; s/new value/x/' file", ReadOnly, ""},
	{"sed -e 's/a/b/' -e 's/c/d/' file", ReadOnly, ""},
	{"awk '{print $1}' file", ReadOnly, ""},
	{"awk -F: -v n=1 '{ print $n }' /etc/passwd", ReadOnly, ""},
	{"[ -f x ] && echo yes", ReadOnly, ""},
	{"[[ -n $x ]] || echo empty", ReadOnly, ""},
	{"test -d dir", ReadOnly, ""},
	{"if true; then ls; fi", ReadOnly, ""},
	{"if [ -f a ]; then cat a; elif [ -f b ]; then cat b; else echo none; fi", ReadOnly, ""},
	{"for f in *.go; do wc -l \"$f\"; done", ReadOnly, ""},
	{"while read -r line; do echo \"$line\"; done < file", ReadOnly, ""},
	{"case $x in a) ls ;; *) pwd ;; esac", ReadOnly, ""},
	{"(cd /tmp && ls)", ReadOnly, ""},
	{"{ pwd; ls; }", ReadOnly, ""},
	{"echo $(ls | wc -l)", ReadOnly, ""},
	{"diff <(sort a) <(sort b)", ReadOnly, ""},
	{"X=1 ls", ReadOnly, ""},
	{"X=1", ReadOnly, ""},
	{"X=$(pwd) Y=2", ReadOnly, ""},
	{"export PATH=/x:$PATH; local a; declare -a arr=(1 2)", ReadOnly, ""},
	{"cd /tmp; pushd x; popd", ReadOnly, ""},
	{"set", ReadOnly, ""},
	{"set -euo pipefail; ls", ReadOnly, ""},
	{": ; true ; false", ReadOnly, ""},
	{"let x=1+2; (( y++ ))", ReadOnly, ""},
	{"cat <<EOF\nhello $(pwd)\nEOF", ReadOnly, ""},
	{"grep -r foo . < /dev/null", ReadOnly, ""},
	{"/usr/bin/ls -l", ReadOnly, ""},
	{"'ls' \"-l\"", ReadOnly, ""},
	{"time ls", ReadOnly, ""},
	{"timeout 5 grep -r x .", ReadOnly, ""},
	{"find . -name '*.go' | xargs grep -n TODO", ReadOnly, ""},
	{"! grep -q x file", ReadOnly, ""},
	{"command -v git >/dev/null 2>&1", ReadOnly, ""},
	{"bash -c 'ls -la | head'", ReadOnly, ""},
	{"bash --version", ReadOnly, ""},
	{"ls |& grep x", ReadOnly, ""},

	// Redirections.
	{"cat x > y", Mutating, `output redirection to "y"`},
	{"echo hi >> log.txt", Mutating, `output redirection to "log.txt"`},
	{"ls &> out.txt", Mutating, `output redirection to "out.txt"`},
	{"ls >| out.txt", Mutating, `output redirection to "out.txt"`},
	{"ls >& out.txt", Mutating, `output redirection to "out.txt"`},
	{"cat <> file", Mutating, `output redirection to "file"`},
	{"> empty.txt", Mutating, `output redirection to "empty.txt"`},
	{`echo x > "$f"`, Mutating, `output redirection to "\"$f\""`},
	{"{ ls; } > out", Mutating, `output redirection to "out"`},
	{"cat x 2>/dev/null", ReadOnly, ""},
	{"ls 2>&1", ReadOnly, ""},
	{"echo err >&2", ReadOnly, ""},
	{"ls 3>&-", ReadOnly, ""},
	{"echo hi > /dev/stderr", ReadOnly, ""},
	{"cat < in.txt", ReadOnly, ""},
	{"cat <<< 'text'", ReadOnly, ""},

	// Mutating commands and arguments.
	{"rm -rf build", Mutating, `"rm" is not known to be read-only`},
	{"for f in *; do rm $f; done", Mutating, `"rm" is not known to be read-only`},
	{"ls && touch x", Mutating, `"touch" is not known to be read-only`},
	{"echo $(rm x)", Mutating, `"rm"`},
	{"X=$(rm y)", Mutating, `"rm"`},
	{"cat <(touch x)", Mutating, `"touch"`},
	{"less file", Mutating, `"less"`},
	{"./ls", Mutating, `"./ls" is not known to be read-only`},
	{"git commit -m x", Mutating, `"git commit" is not known to be read-only`},
	{"git push", Mutating, `"git push"`},
	{"git branch new-feature", Mutating, `"git branch"`},
	{"git branch -D old", Mutating, `"git branch"`},
	{"git tag v1.0", Mutating, `"git tag"`},
	{"git stash", Mutating, `"git stash"`},
	{"git reflog expire --all", Mutating, `"git reflog"`},
	{"git remote add origin x", Mutating, `"git remote"`},
	{"git config user.name bob", Mutating, `"git config"`},
	{"git config --unset user.name", Mutating, `"git config"`},
	{"git diff --output=patch.diff", Mutating, `--output`},
	{"git -c core.pager='rm -rf x' log", Mutating, `core.pager`},
	{"git --exec-path=/tmp status", Mutating, `--exec-path`},
	{"find . -name x -delete", Mutating, `"find -delete"`},
	{"find . -type f -exec rm {} +", Mutating, `"find -exec"`},
	{"find . -fprint out.txt", Mutating, `"find -fprint"`},
	{"sed -i s/a/b/ f", Mutating, `"sed -i"`},
	{"sed -i.bak 's/a/b/' f", Mutating, `"sed -i"`},
	{"sed -ni 's/a/b/p' f", Mutating, `"sed -i"`},
	{"sed --in-place 's/a/b/' f", Mutating, `"sed -i"`},
	{"sed -n '/x/w out.txt' f", Mutating, "may write files"},
	{"sed 's/a/b/w out.txt' f", Mutating, "may write files"},
	{"sed 's/a/date/e' f", Mutating, "may write files"},
	{"awk '{ print > \"out\" }' f", Mutating, `contains ">"`},
	{"awk 'BEGIN { system(\"rm x\") }'", Mutating, `contains "system"`},
	{"awk '{ print | \"sort\" }' f", Mutating, `contains "|"`},
	{"gawk -i inplace '{print}' f", Mutating, `"gawk -i"`},
	{"gawk --lint '{ system(\"x\") }' f", Mutating, `contains "system"`},
	{"sort -o out.txt in.txt", Mutating, `"sort -o"`},
	{"sort -no out.txt in.txt", Mutating, `"sort -o"`},
	{"sort --output=out in", Mutating, `"sort -o"`},
	{"uniq in.txt out.txt", Mutating, "two operands"},
	{"date -s '2020-01-01'", Mutating, `"date -s"`},
	{"date 0101000020", Mutating, "sets the clock"},
	{"hostname newname", Mutating, "sets the host name"},
	{"xxd -r dump.hex", Mutating, `"xxd -r"`},
	{"xxd in.bin out.hex", Mutating, "two operands"},
	{"tree -o out.txt", Mutating, `"tree -o"`},
	{"rg --pre ./decode x", Mutating, `"rg --pre"`},
	{"yq -i '.a = 1' f.yaml", Mutating, `"yq -i"`},
	{"env rm x", Mutating, `"rm"`},
	{"sudo ls", Mutating, `"sudo" is not known to be read-only`},
	{"find . | xargs sed s/a/b/", Mutating, "xargs"},
	{"find . | xargs rm", Mutating, `"rm"`},
	{"bash script.sh", Mutating, "script file"},
	{"sh", Mutating, "standard input"},
	{"bash -c 'rm -rf x'", Mutating, `"rm"`},
	{"watch ls", Mutating, `"watch"`},
	{"ionice -p 123", Mutating, "other processes"},
	{"/usr/bin/time -o t.txt ls", Mutating, `"time -o"`},

	// Read-only git.
	{"git status", ReadOnly, ""},
	{"git -C /tmp --no-pager log --oneline", ReadOnly, ""},
	{"git -c color.ui=always diff HEAD~1", ReadOnly, ""},
	{"git --git-dir=.git show HEAD:go.mod", ReadOnly, ""},
	{"git rev-parse --abbrev-ref HEAD", ReadOnly, ""},
	{"git branch", ReadOnly, ""},
	{"git branch -a -v", ReadOnly, ""},
	{"git branch -avv", ReadOnly, ""},
	{"git branch --show-current", ReadOnly, ""},
	{"git branch --list 'feat/*'", ReadOnly, ""},
	{"git branch --merged main", ReadOnly, ""},
	{"git remote", ReadOnly, ""},
	{"git remote -v", ReadOnly, ""},
	{"git remote get-url origin", ReadOnly, ""},
	{"git config --get user.email", ReadOnly, ""},
	{"git config --list", ReadOnly, ""},
	{"git config -l --show-origin", ReadOnly, ""},
	{"git config user.email", ReadOnly, ""},
	{"git tag", ReadOnly, ""},
	{"git tag -l 'v1.*'", ReadOnly, ""},
	{"git tag --list", ReadOnly, ""},
	{"git stash list", ReadOnly, ""},
	{"git reflog", ReadOnly, ""},
	{"git reflog show main", ReadOnly, ""},
	{"git log --oneline | head -5", ReadOnly, ""},
	{"git diff --output-indicator-new=+ HEAD", ReadOnly, ""},
	{"git --version", ReadOnly, ""},

	// Cannot be judged statically.
	{"$CMD arg", Complex, `dynamic command name "$CMD"`},
	{"${CMD:-ls} -l", Complex, "dynamic command name"},
	{"$(which ls) -l", Complex, "dynamic command name"},
	{"l* -la", Complex, "dynamic command name"},
	{"{ls,-la}", Complex, "dynamic command name"},
	{"eval ls", Complex, `"eval"`},
	{"source ./env.sh", Complex, `"source"`},
	{". ./env.sh", Complex, `"."`},
	{"exec 2>&1", Complex, `"exec"`},
	{"exec $CMD", Complex, "dynamic command name"},
	{"trap 'echo bye' EXIT", Complex, `"trap"`},
	{"f() { ls; }", Complex, `function definition "f"`},
	{"function g { rm x; }", Complex, `function definition "g"`},
	{"env $CMD", Complex, "dynamic command name"},
	{"bash -c \"$SCRIPT\"", Complex, "dynamic"},
	{"git $SUB", Complex, "dynamic git subcommand"},
	{`sed "s/$a/b/" f`, Complex, "dynamic sed script"},
	{"sed -f script.sed f", Complex, "cannot be checked"},
	{"awk -f prog.awk f", Complex, "cannot be checked"},
	{"echo 'unterminated", Complex, "parse error: "},
	{"if true; then", Complex, "parse error"},
	{"ls )", Complex, "parse error"},
	{"bash -c 'echo \"x'", Complex, "parse error in"},
	{"rm x; $CMD", Complex, "dynamic command name"},
	{`bash -c "bash -c \"bash -c 'bash -c \\\"bash -c \\\\\\\"bash -c ls\\\\\\\"\\\"'\""`, Complex, "nested"},
}

func TestCommand(t *testing.T) {
	for _, tc := range cases {
		t.Run(tc.src, func(t *testing.T) {
			got := Command(tc.src)
			if got.Reasons == nil {
				t.Fatalf("Reasons is nil")
			}
			if got.Class != tc.class {
				t.Fatalf("Command(%q).Class = %q, want %q (reasons %q)", tc.src, got.Class, tc.class, got.Reasons)
			}
			if tc.class == ReadOnly && len(got.Reasons) != 0 {
				t.Errorf("read-only result has reasons %q", got.Reasons)
			}
			if tc.class != ReadOnly && len(got.Reasons) == 0 {
				t.Errorf("%s result has no reasons", got.Class)
			}
			if tc.reason != "" && !containsReason(got.Reasons, tc.reason) {
				t.Errorf("reasons %q do not mention %q", got.Reasons, tc.reason)
			}
		})
	}
}

func containsReason(reasons []string, sub string) bool {
	for _, r := range reasons {
		if strings.Contains(r, sub) {
			return true
		}
	}
	return false
}

// TestOnlyWinningReasons checks that reasons of weaker classes are left out
// and duplicates are dropped.
func TestOnlyWinningReasons(t *testing.T) {
	got := Command("rm a; sleep 1 & sleep 2 & $X")
	want := []string{`background operator "&"`}
	if got.Class != Refused || strings.Join(got.Reasons, "|") != strings.Join(want, "|") {
		t.Fatalf("got %v %q, want refused %q", got.Class, got.Reasons, want)
	}
	got = Command("rm a > out; touch b")
	want = []string{`"rm" is not known to be read-only`, `output redirection to "out"`, `"touch" is not known to be read-only`}
	if got.Class != Mutating || strings.Join(got.Reasons, "|") != strings.Join(want, "|") {
		t.Fatalf("got %v %q, want mutating %q", got.Class, got.Reasons, want)
	}
}

func FuzzCommand(f *testing.F) {
	for _, tc := range cases {
		f.Add(tc.src)
	}
	f.Fuzz(func(t *testing.T, src string) {
		got := Command(src)
		switch got.Class {
		case ReadOnly, Mutating, Complex, Refused:
		default:
			t.Fatalf("Command(%q) gave unknown class %q", src, got.Class)
		}
		if got.Reasons == nil {
			t.Fatalf("Command(%q) gave nil Reasons", src)
		}
		for _, r := range got.Reasons {
			if strings.HasPrefix(r, "internal error") {
				t.Fatalf("Command(%q) panicked inside: %s", src, r)
			}
		}
	})
}

// A megabyte of nested brackets would overflow the parser's stack (a
// fatal error, the helper gone): it is judged Complex without parsing.
func TestDeepBracketsAreComplexNotACrash(t *testing.T) {
	for _, open := range []string{"$((", "${a:-", "(", "\"$(", "a=("} {
		src := strings.Repeat(open, (1<<20)/len(open))
		if r := Command(src); r.Class != Complex {
			t.Errorf("%q x %d: %v", open, (1<<20)/len(open), r)
		}
	}
	if r := Command(strings.Repeat("(", 500) + "ls" + strings.Repeat(")", 500)); r.Class != ReadOnly {
		t.Errorf("500 levels: %v, want it parsed", r)
	}
}

// A command of plain words is judged without the parser, exactly as the
// parser's walk judges it: over the table's commands, every command and
// wrapper the analyser knows with option-like and path-like arguments,
// and random plain words.
func TestPlainWordsJudgedAsParsed(t *testing.T) {
	var srcs []string
	for _, tc := range cases {
		srcs = append(srcs, tc.src)
	}
	var names []string
	for n := range readOnly {
		names = append(names, n)
	}
	for n := range detaching {
		names = append(names, n)
	}
	for n := range wrappers {
		names = append(names, n)
	}
	for n := range checkers {
		names = append(names, n)
	}
	names = append(names, "rm", "git", "bg", "cp", "/bin/rm", "./x", "make", "true", "[")
	argsets := []string{"", " -f", " -i x", " --help", " -n 5 file", " status", " log --oneline", " push", " -- rm x",
		" -c ls", " sh -c ls", " ls", " rm -rf /tmp/x", " -s 9 1", " 1", " %1", " a=b", " -o out", " --output=x x"}
	for _, n := range names {
		for _, a := range argsets {
			srcs = append(srcs, n+a)
		}
	}
	rnd := rand.New(rand.NewPCG(3, 4))
	alphabet := []byte("abcdefgilmnorstx-=/. ")
	for range 5000 {
		b := make([]byte, 1+rnd.IntN(14))
		for i := range b {
			b[i] = alphabet[rnd.IntN(len(alphabet))]
		}
		srcs = append(srcs, string(b))
	}
	plain := 0
	for _, src := range srcs {
		if _, ok := shwords.Plain(src); !ok {
			continue
		}
		plain++
		var a analyzer
		a.parsed(src, 0, "")
		want, got := a.result(), Command(src)
		if got.Class != want.Class || !slices.Equal(got.Reasons, want.Reasons) {
			t.Errorf("%q: judged %s %q without the parser, %s %q with it", src, got.Class, got.Reasons, want.Class, want.Reasons)
		}
	}
	if plain < 2000 {
		t.Fatalf("only %d of %d commands were plain words", plain, len(srcs))
	}
	if n := testing.AllocsPerRun(20, func() { Command("go test ./...") }); n > 12 {
		t.Errorf("%v allocations to judge go test ./..., want the parser left out", n)
	}
}
