package readme

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// TestLinks requires every relative link of README.md, CONTRIBUTING.md and
// docs/*.md to name a file or directory of the repository and, with a
// #fragment into a Markdown file, one of that file's headings, by the
// anchors GitHub gives them. Links with a scheme (https:) are not
// followed. Every page under docs/ must be linked from README.md, where
// readers start.
func TestLinks(t *testing.T) {
	fromReadme := map[string]bool{}
	for _, doc := range markdownFiles(t, true) {
		for _, l := range links(string(readDoc(t, doc))) {
			if problem := checkLink(doc, l.target); problem != "" {
				t.Errorf("%s:%d: link %s: %s", doc, l.line, l.target, problem)
			}
			if doc == "README.md" {
				file, _, _ := strings.Cut(l.target, "#")
				fromReadme[path.Clean(file)] = true
			}
		}
	}
	for _, doc := range markdownFiles(t, false) {
		if strings.HasPrefix(doc, "docs/") && !fromReadme[doc] {
			t.Errorf("%s: no link to it from README.md", doc)
		}
	}
}

// checkLink returns what is wrong with a link of doc, or "".
func checkLink(doc, target string) string {
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		return ""
	}
	file, fragment, _ := strings.Cut(target, "#")
	rel := doc
	if file != "" {
		rel = path.Join(path.Dir(doc), file)
	}
	if rel == ".." || strings.HasPrefix(rel, "../") || path.IsAbs(file) {
		return "outside the repository"
	}
	if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(rel))); err != nil {
		return fmt.Sprintf("%s does not exist", rel)
	}
	if fragment == "" || !strings.HasSuffix(rel, ".md") {
		return ""
	}
	src, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
	if err != nil {
		return err.Error()
	}
	if anchors := anchors(string(src)); !slices.Contains(anchors, fragment) {
		return fmt.Sprintf("%s has no heading #%s; it has %s", rel, fragment, strings.Join(anchors, ", "))
	}
	return ""
}

// link is one inline link of a Markdown document.
type link struct {
	line   int // 1-based
	target string
}

// mdLink is an inline link or image, [text](target), whose text holds no
// bracket.
var mdLink = regexp.MustCompile(`\[[^\[\]]*\]\(([^()\s]+)\)`)

// links returns a document's inline links, outside fenced blocks.
func links(doc string) []link {
	var out []link
	for i, line := range strings.Split(unfenced(doc), "\n") {
		for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
			out = append(out, link{line: i + 1, target: m[1]})
		}
	}
	return out
}

// unfenced returns doc with the lines of its fenced blocks, fences
// included, blanked, so that line numbers stay.
func unfenced(doc string) string {
	lines := strings.Split(doc, "\n")
	in := false
	for i, l := range lines {
		trimmed := strings.TrimSpace(l)
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			in = !in
			lines[i] = ""
			continue
		}
		if in {
			lines[i] = ""
		}
	}
	return strings.Join(lines, "\n")
}

// anchors returns the anchors GitHub gives a document's headings: the
// heading's text, lower-cased, without characters other than letters,
// digits, spaces, hyphens and underscores, spaces made hyphens; a repeated
// anchor gets -1, -2, ...
func anchors(doc string) []string {
	var out []string
	seen := map[string]int{}
	for _, line := range strings.Split(unfenced(doc), "\n") {
		text, ok := heading(line)
		if !ok {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			seen[a]++
			a = fmt.Sprintf("%s-%d", a, n)
		} else {
			seen[a] = 1
		}
		out = append(out, a)
	}
	return out
}

// heading returns the text of an ATX heading line.
func heading(line string) (string, bool) {
	level := len(line) - len(strings.TrimLeft(line, "#"))
	if level == 0 || level > 6 || !strings.HasPrefix(line[level:], " ") {
		return "", false
	}
	return strings.TrimSpace(strings.TrimRight(strings.TrimSpace(line[level:]), "#")), true
}

func TestAnchors(t *testing.T) {
	doc := "# kubewire\n## The fix, in one call\n### Plain net/http\n```sh\n# not a heading\n```\n" +
		"## Diagnose a client: `kubewire probe`\n## Soak: the API server's audit log\n#hashtag\n## Notes\n## Notes\n"
	want := []string{"kubewire", "the-fix-in-one-call", "plain-nethttp", "diagnose-a-client-kubewire-probe",
		"soak-the-api-servers-audit-log", "notes", "notes-1"}
	if got := anchors(doc); !reflect.DeepEqual(got, want) {
		t.Errorf("anchors = %q, want %q", got, want)
	}
}

func TestLinksFound(t *testing.T) {
	doc := "see [the soak](docs/soak.md) and [`rbac/`](../examples/gateway/rbac/),\n" +
		"```md\n[not a link](nowhere.md)\n```\n[RBAC](#rbac-of-the-gateway) [web](https://example.com/a)"
	want := []link{{1, "docs/soak.md"}, {1, "../examples/gateway/rbac/"}, {5, "#rbac-of-the-gateway"}, {5, "https://example.com/a"}}
	if got := links(doc); !reflect.DeepEqual(got, want) {
		t.Errorf("links = %+v, want %+v", got, want)
	}
}

func TestCheckLink(t *testing.T) {
	tests := []struct {
		doc, give string
		wantWrong bool
	}{
		{doc: "README.md", give: "docs/soak.md"},
		{doc: "README.md", give: "#the-stack"},
		{doc: "README.md", give: "https://example.com/nowhere.md"},
		{doc: "docs/gateway.md", give: "../examples/gateway/rbac/"},
		{doc: "docs/gateway.md", give: "#rbac-of-the-gateway"},
		{doc: "docs/client-go.md", give: "../README.md#the-fix-in-one-call"},
		{doc: "README.md", give: "docs/nowhere.md", wantWrong: true},
		{doc: "README.md", give: "#no-such-heading", wantWrong: true},
		{doc: "docs/soak.md", give: "soak.md#no-such-heading", wantWrong: true},
		{doc: "docs/soak.md", give: "examples/gateway", wantWrong: true}, // relative to docs/
		{doc: "README.md", give: "../outside.md", wantWrong: true},
	}
	for _, tt := range tests {
		if got := checkLink(tt.doc, tt.give); (got != "") != tt.wantWrong {
			t.Errorf("checkLink(%s, %s) = %q, want wrong %v", tt.doc, tt.give, got, tt.wantWrong)
		}
	}
}

// repoPath is a slash-separated path, maybe after ./, not preceded by
// what would make it part of a URL, a module path or a longer path.
var repoPath = regexp.MustCompile(`(?:^|[^\w./$~:-])(?:\./)?([A-Za-z_][\w.-]*(?:/[\w.-]+)+/?)`)

// TestPaths requires each path of the repository that README.md,
// CONTRIBUTING.md or docs/*.md names, in prose or in a fenced block, to
// exist: a word with a slash whose first element is a top-level directory
// (driver/reconciler/doc.go, test/kubetest, `cd test/kubeadapter`). A
// path that ends in a Go selector (internal/hooks.IsNil) names the
// package's directory. Paths relative to something else (rbac/x.yaml in a
// page about examples/gateway) do not start with a top-level directory and
// are not checked.
func TestPaths(t *testing.T) {
	tops := topDirs(t)
	checked := 0
	for _, doc := range markdownFiles(t, true) {
		for i, line := range strings.Split(string(readDoc(t, doc)), "\n") {
			for _, p := range repoPaths(line, tops) {
				checked++
				if !exists(p) {
					t.Errorf("%s:%d: %s does not exist in the repository", doc, i+1, p)
				}
			}
		}
	}
	if checked == 0 {
		t.Error("no repository path found in the docs: the parser or the docs changed")
	}
}

// repoPaths returns the paths of a line whose first element is in tops,
// without trailing dots or slashes.
func repoPaths(line string, tops []string) []string {
	var out []string
	for _, m := range repoPath.FindAllStringSubmatch(line, -1) {
		p := strings.TrimRight(m[1], "./")
		first, _, _ := strings.Cut(p, "/")
		if slices.Contains(tops, first) {
			out = append(out, p)
		}
	}
	return out
}

// exists reports whether p, relative to root, exists, or is a directory
// followed by a Go selector (transport/transporttest.TestMiddleware).
func exists(p string) bool {
	if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(p))); err == nil {
		return true
	}
	dir, last := path.Split(p)
	for i := 0; i < len(last)-1; i++ {
		if last[i] == '.' && unicode.IsUpper(rune(last[i+1])) {
			fi, err := os.Stat(filepath.Join(root, filepath.FromSlash(dir+last[:i])))
			return err == nil && fi.IsDir()
		}
	}
	return false
}

// topDirs returns the repository's top-level directories, hidden ones
// excepted.
func topDirs(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			dirs = append(dirs, e.Name())
		}
	}
	return dirs
}

func TestRepoPaths(t *testing.T) {
	tops := []string{"driver", "internal", "test", "examples"}
	tests := []struct {
		give string
		want []string
	}{
		{give: "see driver/reconciler/doc.go.", want: []string{"driver/reconciler/doc.go"}},
		{give: "cd test/kubeadapter && go test ./reconciler", want: []string{"test/kubeadapter"}},
		{give: "`go run ./examples/gateway` and examples/gateway/rbac/", want: []string{"examples/gateway", "examples/gateway/rbac"}},
		{give: "`internal/hooks.IsNil` (driver/reconciler's options)", want: []string{"internal/hooks.IsNil", "driver/reconciler"}},
		{give: "https://github.com/x/driver/y github.com/kubewire/kubewire/driver", want: nil},
		{give: "$(go env GOCACHE)/../kubewire-envtest/1.37.2, HTTP/1.1, raw/reconciler, rbac/v1alpha1.yaml", want: nil},
	}
	for _, tt := range tests {
		if got := repoPaths(tt.give, tops); !slices.Equal(got, tt.want) {
			t.Errorf("repoPaths(%q) = %q, want %q", tt.give, got, tt.want)
		}
	}
}

func TestExists(t *testing.T) {
	tests := []struct {
		give string
		want bool
	}{
		{give: "hack/readme", want: true},
		{give: "hack/readme/readme_test.go", want: true},
		{give: "transport/transporttest.TestMiddleware", want: true},
		{give: "internal/nowhere", want: false},
		{give: "internal/nowhere.Run", want: false},
		{give: "hack/readme/readme_test.go.Gone", want: false}, // a selector names a directory
	}
	for _, tt := range tests {
		if got := exists(tt.give); got != tt.want {
			t.Errorf("exists(%q) = %v, want %v", tt.give, got, tt.want)
		}
	}
}

// testName is a test, benchmark, example or fuzz function's name; a
// trailing * makes it a prefix. A name a package qualifies
// (`transporttest.TestMiddleware`) is an exported function of that package,
// which a kit names as testing/fstest names TestFS, not a test.
var testName = regexp.MustCompile(`(?:^|[^.\w])((?:Test|Benchmark|Example|Fuzz)[A-Z0-9_]\w*\*?)`)

// TestTestNamesExist requires each test, benchmark, example or fuzz test
// that README.md, CONTRIBUTING.md or docs/*.md names (`TestSoak`, `go test
// -run TestResendByPrecondition`, `BenchmarkRecovery*`) to be declared in
// some _test.go file of the repository, every module included.
func TestTestNamesExist(t *testing.T) {
	declared := testFuncs(t)
	named := 0
	for _, doc := range markdownFiles(t, true) {
		for i, line := range strings.Split(string(readDoc(t, doc)), "\n") {
			for _, m := range testName.FindAllStringSubmatch(line, -1) {
				name := m[1]
				named++
				prefix, isPrefix := strings.CutSuffix(name, "*")
				if !slices.ContainsFunc(declared, func(d string) bool {
					return d == name || (isPrefix && strings.HasPrefix(d, prefix))
				}) {
					t.Errorf("%s:%d: no _test.go file declares %s", doc, i+1, name)
				}
			}
		}
	}
	if named == 0 {
		t.Error("the docs name no test: the parser or the docs changed")
	}
}

var testFunc = regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Example|Fuzz)\w*)\(`)

// testFuncs returns the names of the top-level functions of every _test.go
// file of the repository that look like tests, skipping what the go
// command skips (testdata, directories starting with "." or "_").
func testFuncs(t *testing.T) []string {
	t.Helper()
	var names []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); p != root && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(d.Name(), "_test.go") {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range testFunc.FindAllStringSubmatch(string(src), -1) {
			names = append(names, m[1])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}
