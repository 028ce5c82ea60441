// Package readme checks the repository's prose: README.md, CONTRIBUTING.md
// and the pages under docs/. Every Go sample of README.md and docs/*.md is
// the body of an Example function, so that the sample compiles wherever
// its module's tests run; the Go identifiers, test names, repository paths
// and relative links the documents cite exist; and README.md stays under
// [maxReadmeLines] lines. The checks are tests of the tools module, not of
// a module users build: `make docs` runs them.
package readme

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/build"
	"go/parser"
	"go/scanner"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// root is the repository root, from this package's directory.
const root = "../.."

// block is one fenced block of a document.
type block struct {
	line int      // of the opening fence, 1-based
	body []string // the lines between the fences, as written
}

// example is the body of one Example function, a line per element.
type example struct {
	name  string // file and function, for messages
	lines []string
}

// maxReadmeLines bounds README.md: its first screen shows the
// architecture, and long material (measurements, the soak, reference
// tables) goes to a page under docs/, linked from it.
const maxReadmeLines = 300

// TestReadmeLength keeps README.md under maxReadmeLines lines.
func TestReadmeLength(t *testing.T) {
	readme := readDoc(t, "README.md")
	n := bytes.Count(readme, []byte("\n"))
	if len(readme) > 0 && readme[len(readme)-1] != '\n' {
		n++
	}
	if n >= maxReadmeLines {
		t.Errorf("README.md has %d lines, want fewer than %d: move long material to a page under docs/ and link it", n, maxReadmeLines)
	}
}

// markdownFiles returns the documents the tests read, relative to root:
// README.md, CONTRIBUTING.md if withContributing, and docs/*.md.
func markdownFiles(t *testing.T, withContributing bool) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) == 0 {
		t.Fatal("no docs/*.md page: the pages moved, or the glob is wrong")
	}
	docs := []string{"README.md"}
	if withContributing {
		docs = append(docs, "CONTRIBUTING.md")
	}
	for _, p := range pages {
		rel, err := filepath.Rel(root, p)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, filepath.ToSlash(rel))
	}
	return docs
}

// readDoc reads a document by its path relative to root.
func readDoc(t *testing.T, doc string) []byte {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(doc)))
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// TestSamplesAreExamples requires, for each ```go block of README.md and
// docs/*.md, an Example function in some example_test.go of the repository
// whose body holds every code line of the block, in order; lines in
// between are allowed. Lines are compared as Go tokens, so comments and
// spacing do not count. A line that is only an elision ("...", or
// "{ ... }" in it) is skipped: better, write the sample without one.
func TestSamplesAreExamples(t *testing.T) {
	examples := findExamples(t)
	if len(examples) == 0 {
		t.Fatal("no Example function found in any example_test.go")
	}
	for _, doc := range markdownFiles(t, false) {
		blocks := fenced(readDoc(t, doc), "go")
		if doc == "README.md" && len(blocks) == 0 {
			t.Error("README.md has no ```go block: the parser or the README changed")
		}
		for _, b := range blocks {
			lines, raw := codeLines(b)
			if len(lines) == 0 {
				t.Errorf("%s:%d: a ```go block with no code line", doc, b.line)
				continue
			}
			var best example
			bestN := -1
			for _, e := range examples {
				if n := matched(lines, e.lines); n > bestN {
					best, bestN = e, n
				}
			}
			if bestN == len(lines) {
				t.Logf("%s:%d: %s", doc, b.line, best.name)
				continue
			}
			t.Errorf("%s:%d: no Example function holds this ```go block's lines in order; "+
				"add one in the package the sample uses (in its module), or fix the sample. "+
				"Closest: %s, which lacks %q", doc, b.line, best.name, raw[bestN])
		}
	}
}

// fenced returns a document's fenced blocks whose info string is lang
// (```go, ```mermaid).
func fenced(doc []byte, lang string) []block {
	var (
		blocks []block
		cur    *block
		other  bool // inside a block of another language
	)
	sc := bufio.NewScanner(bytes.NewReader(doc))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case cur == nil && !other && trimmed == "```"+lang:
			cur = &block{line: n}
		case cur == nil && !other && strings.HasPrefix(trimmed, "```"):
			other = true
		case trimmed == "```":
			if cur != nil {
				blocks = append(blocks, *cur)
			}
			cur, other = nil, false
		case cur != nil:
			cur.body = append(cur.body, line)
		}
	}
	return blocks
}

func TestFenced(t *testing.T) {
	doc := "text\n```go\na := 1\n\nb := 2\n```\n```sh\n```go\n```\n  ```mermaid\nflowchart LR\n  ```\n"
	if got, want := fenced([]byte(doc), "go"), []block{{line: 2, body: []string{"a := 1", "", "b := 2"}}}; !reflect.DeepEqual(got, want) {
		t.Errorf("fenced(go) = %+v, want %+v", got, want)
	}
	if got, want := fenced([]byte(doc), "mermaid"), []block{{line: 10, body: []string{"flowchart LR"}}}; !reflect.DeepEqual(got, want) {
		t.Errorf("fenced(mermaid) = %+v, want %+v", got, want)
	}
}

// codeLines returns a ```go block's code lines, normalized, and the same
// lines as written, for messages.
func codeLines(b block) (lines, raw []string) {
	for _, line := range b.body {
		if l := normalize(line); l != "" && !elision(l) {
			lines = append(lines, l)
			raw = append(raw, strings.TrimSpace(line))
		}
	}
	return lines, raw
}

func elision(l string) bool {
	return l == "..." || strings.Contains(l, "{ ... }")
}

// findExamples parses every example_test.go of the repository, every
// module included, skipping what the go command skips (testdata, and
// directories starting with "." or "_").
func findExamples(t *testing.T) []example {
	t.Helper()
	var examples []example
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Name() != "example_test.go" {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || fn.Body == nil || !strings.HasPrefix(fn.Name.Name, "Example") {
				continue
			}
			body := src[fset.Position(fn.Body.Lbrace).Offset+1 : fset.Position(fn.Body.Rbrace).Offset]
			e := example{name: fmt.Sprintf("%s %s", filepath.ToSlash(rel), fn.Name.Name)}
			for _, line := range strings.Split(string(body), "\n") {
				if l := normalize(line); l != "" {
					e.lines = append(e.lines, l)
				}
			}
			examples = append(examples, e)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return examples
}

// matched returns how many of want, from the first, occur in have in
// order.
func matched(want, have []string) int {
	n := 0
	for _, h := range have {
		if n < len(want) && h == want[n] {
			n++
		}
	}
	return n
}

// normalize returns line's Go tokens separated by single spaces, without
// comments or the semicolons the scanner inserts, so that gofmt's spacing
// (10*time.Second in one place, 10 * time.Second in another) and trailing
// comments do not matter.
func normalize(line string) string {
	src := []byte(line)
	fset := token.NewFileSet()
	var s scanner.Scanner
	s.Init(fset.AddFile("", -1, len(src)), src, func(token.Position, string) {}, 0)
	var toks []string
	for {
		_, tok, lit := s.Scan()
		if tok == token.EOF {
			break
		}
		if tok == token.SEMICOLON && lit == "\n" {
			continue
		}
		if lit == "" {
			lit = tok.String()
		}
		toks = append(toks, lit)
	}
	return strings.Join(toks, " ")
}

func TestNormalize(t *testing.T) {
	tests := []struct {
		give, want string
	}{
		{give: "\trt := m.Stack(10 * time.Second)(base) // plain net/http", want: "rt := m . Stack ( 10 * time . Second ) ( base )"},
		{give: "rt := m.Stack(10*time.Second)(base)", want: "rt := m . Stack ( 10 * time . Second ) ( base )"},
		{give: `u := "https://example.com" // a URL`, want: `u := "https://example.com"`},
		{give: "// only a comment", want: ""},
		{give: "if err != nil { ... }", want: "if err != nil { ... }"},
	}
	for _, tt := range tests {
		if got := normalize(tt.give); got != tt.want {
			t.Errorf("normalize(%q) = %q, want %q", tt.give, got, tt.want)
		}
	}
}

func TestMatched(t *testing.T) {
	have := []string{"a", "x", "b", "c"}
	tests := []struct {
		give []string
		want int
	}{
		{give: []string{"a", "b", "c"}, want: 3}, // lines in between are allowed
		{give: []string{"b", "a"}, want: 1},      // order counts
		{give: []string{"a", "d"}, want: 1},
	}
	for _, tt := range tests {
		if got := matched(tt.give, have); got != tt.want {
			t.Errorf("matched(%q) = %d, want %d", tt.give, got, tt.want)
		}
	}
}

// foreign holds the references the docs may cite to another library's
// identifier under a package name the repository also uses, with the
// import path they belong to. A package name of ours settles what a
// reference means; these are the exceptions, written out.
var foreign = map[string]string{
	"retry.RetryOnConflict": "k8s.io/client-go/util/retry",
	"transport.WrapperFunc": "k8s.io/client-go/transport",
}

// TestReferencesExist requires each Go reference in a code span of
// README.md, CONTRIBUTING.md and docs/*.md, `pkg.Ident` or `pkg.Type.Member`
// anywhere in the span (`*retry.Error`, `reconciler.New(d, opts...)`),
// whose pkg is the name of one of the repository's packages, to name what
// that package declares in its non-test files: Ident an exported top-level
// identifier; Member a method, field or embedded type declared on Type
// itself, or a method of the interface it is. The packages are found by
// parsing the repository, every module included: each directory with Go
// files the go command builds, main packages and internal ones excepted.
//
// The rule is the simplest honest one: a reference whose pkg is ours is
// checked against ours, even where another library has a package of that
// name (client-go's util/retry and transport). Such a library's
// identifiers go in [foreign]; any other reference that fails names
// something that was renamed or removed. Only identifiers that start with
// a capital letter count, so that file names (doc.go) and domains
// (k8s.io) are no references; fenced blocks are left to
// [TestSamplesAreExamples].
func TestReferencesExist(t *testing.T) {
	pkgs := ourPackages(t)
	if len(pkgs) == 0 {
		t.Fatal("no package found under the repository root")
	}
	for _, doc := range markdownFiles(t, true) {
		src := readDoc(t, doc)
		checked := 0
		for _, r := range references(string(src)) {
			ours, problem := pkgs.check(r)
			if ours {
				checked++
			}
			if problem != "" {
				t.Errorf("%s:%d: `%s`: %s", doc, r.line, r.text, problem)
			}
		}
		if checked == 0 && (doc == "README.md" || doc == "CONTRIBUTING.md") {
			t.Errorf("%s: no reference to a package of the repository: the parser or the file changed", doc)
		}
	}
}

// check reports whether r's pkg is one of ours and, if so, what is wrong
// with r: "" if nothing.
func (pkgs packages) check(r reference) (ours bool, problem string) {
	p, ok := pkgs[r.pkg]
	if !ok {
		return false, ""
	}
	name := r.pkg + "." + r.ident
	if _, ok := foreign[name]; ok {
		return true, ""
	}
	switch {
	case !p.top[r.ident]:
		return true, fmt.Sprintf("package %s (%s) declares no %s", r.pkg, strings.Join(p.dirs, ", "), r.ident)
	case r.member != "" && !p.members[r.ident][r.member]:
		return true, fmt.Sprintf("%s declares no method or field %s", name, r.member)
	}
	return true, ""
}

func TestCheck(t *testing.T) {
	pkgs := ourPackages(t)
	tests := []struct {
		give      string
		wantOurs  bool
		wantWrong bool
	}{
		{give: "`reconciler.ErrBusy`", wantOurs: true},
		{give: "`reconciler.ErrRunning`", wantOurs: true, wantWrong: true},
		{give: "`retry.RetryOnConflict`", wantOurs: true}, // client-go's, in foreign
		{give: "`retry.Retry`", wantOurs: true, wantWrong: true},
		{give: "`drivermetrics.Metrics.Collect`", wantOurs: true},
		{give: "`drivermetrics.Metrics.Set`", wantOurs: true, wantWrong: true},
		{give: "`reconciler.LeaderElection.Name`", wantOurs: true},
		{give: "`reconciler.Observer.ObservePass`", wantOurs: true},
		{give: "`http.Transport.HTTP2`"},
		{give: "`workqueue.MetricsProvider`"},
	}
	for _, tt := range tests {
		refs := references(tt.give)
		if len(refs) != 1 {
			t.Fatalf("references(%q) = %+v, want one", tt.give, refs)
		}
		ours, problem := pkgs.check(refs[0])
		if ours != tt.wantOurs || (problem != "") != tt.wantWrong {
			t.Errorf("check(%s) = %v, %q; want ours %v, wrong %v", tt.give, ours, problem, tt.wantOurs, tt.wantWrong)
		}
	}
}

// reference is one `pkg.Ident` or `pkg.Ident.Member` of a code span.
type reference struct {
	line               int    // 1-based
	text               string // as written
	pkg, ident, member string
}

var (
	// codeSpan is an inline code span, which may run over lines but not
	// over a blank one.
	codeSpan = regexp.MustCompile("`([^`\n]+(?:\n[^`\n]+)*)`")
	// goRef is a qualified identifier not preceded by a name or a dot.
	goRef = regexp.MustCompile(`(?:^|[^\w.])([a-z][a-z0-9]*)\.([A-Z]\w*)(?:\.([A-Z]\w*))?`)
)

// references returns the Go references in the code spans of a Markdown
// document, outside fenced blocks.
func references(doc string) []reference {
	lines := strings.Split(doc, "\n")
	fenced := false
	for i, l := range lines {
		trimmed := strings.TrimSpace(l)
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fenced = !fenced
			lines[i] = ""
			continue
		}
		if fenced {
			lines[i] = ""
		}
	}
	text := strings.Join(lines, "\n")
	var refs []reference
	for _, span := range codeSpan.FindAllStringSubmatchIndex(text, -1) {
		code := text[span[2]:span[3]]
		for _, m := range goRef.FindAllStringSubmatchIndex(code, -1) {
			r := reference{
				line:  1 + strings.Count(text[:span[2]+m[2]], "\n"),
				text:  code[m[2]:m[1]],
				pkg:   code[m[2]:m[3]],
				ident: code[m[4]:m[5]],
			}
			if m[6] >= 0 {
				r.member = code[m[6]:m[7]]
			}
			refs = append(refs, r)
		}
	}
	return refs
}

func TestReferences(t *testing.T) {
	tests := []struct {
		give string
		want []reference
	}{
		{give: "see `reconciler.ErrBusy`.", want: []reference{{line: 1, text: "reconciler.ErrBusy", pkg: "reconciler", ident: "ErrBusy"}}},
		{give: "`*retry.Error` and `kubeadapter.WithRetryOptions(retry.WithMaxAttempts(6))`", want: []reference{
			{line: 1, text: "retry.Error", pkg: "retry", ident: "Error"},
			{line: 1, text: "kubeadapter.WithRetryOptions", pkg: "kubeadapter", ident: "WithRetryOptions"},
			{line: 1, text: "retry.WithMaxAttempts", pkg: "retry", ident: "WithMaxAttempts"},
		}},
		{give: "`http.Transport.HTTP2`", want: []reference{{line: 1, text: "http.Transport.HTTP2", pkg: "http", ident: "Transport", member: "HTTP2"}}},
		{give: "a\n`errors.Is(err,\ncontext.DeadlineExceeded)`", want: []reference{
			{line: 2, text: "errors.Is", pkg: "errors", ident: "Is"},
			{line: 3, text: "context.DeadlineExceeded", pkg: "context", ident: "DeadlineExceeded"},
		}},
		{give: "`doc.go`, `k8s.io/client-go/tools/metrics`, `a.b.C`, `m.Stack` outside", want: []reference{{line: 1, text: "m.Stack", pkg: "m", ident: "Stack"}}},
		{give: "```go\nx := `retry.Gone`\n```\nnot code: retry.Gone", want: nil},
	}
	for _, tt := range tests {
		if got := references(tt.give); !slices.Equal(got, tt.want) {
			t.Errorf("references(%q) = %+v, want %+v", tt.give, got, tt.want)
		}
	}
}

// packages holds the repository's packages by name.
type packages map[string]*decls

// decls is what the packages of one name declare in their non-test files.
type decls struct {
	dirs    []string                   // relative to root
	top     map[string]bool            // exported top-level identifiers
	members map[string]map[string]bool // per type: methods, fields, embedded types
}

// ourPackages parses the repository's packages, by name, skipping what
// the go command skips (testdata, directories starting with "." or "_"),
// internal directories, test files, files it would not build here and
// main packages.
func ourPackages(t *testing.T) packages {
	t.Helper()
	pkgs := packages{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (name == "testdata" || name == "internal" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		if ok, err := build.Default.MatchFile(filepath.Dir(path), name); err != nil || !ok {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		if f.Name.Name == "main" {
			return nil
		}
		p := pkgs[f.Name.Name]
		if p == nil {
			p = &decls{top: map[string]bool{}, members: map[string]map[string]bool{}}
			pkgs[f.Name.Name] = p
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		if rel = filepath.ToSlash(rel); !slices.Contains(p.dirs, rel) {
			p.dirs = append(p.dirs, rel)
		}
		p.add(f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}

// add records f's declarations.
func (p *decls) add(f *ast.File) {
	member := func(typ, name string) {
		if p.members[typ] == nil {
			p.members[typ] = map[string]bool{}
		}
		p.members[typ][name] = true
	}
	for _, decl := range f.Decls {
		switch decl := decl.(type) {
		case *ast.FuncDecl:
			if decl.Recv == nil {
				p.top[decl.Name.Name] = true
			} else if typ := typeName(decl.Recv.List[0].Type); typ != "" {
				member(typ, decl.Name.Name)
			}
		case *ast.GenDecl:
			for _, spec := range decl.Specs {
				switch spec := spec.(type) {
				case *ast.ValueSpec:
					for _, n := range spec.Names {
						p.top[n.Name] = true
					}
				case *ast.TypeSpec:
					p.top[spec.Name.Name] = true
					var fields *ast.FieldList
					switch typ := spec.Type.(type) {
					case *ast.StructType:
						fields = typ.Fields
					case *ast.InterfaceType:
						fields = typ.Methods
					}
					if fields == nil {
						continue
					}
					for _, field := range fields.List {
						for _, n := range field.Names {
							member(spec.Name.Name, n.Name)
						}
						if len(field.Names) == 0 {
							if embedded := typeName(field.Type); embedded != "" {
								member(spec.Name.Name, embedded)
							}
						}
					}
				}
			}
		}
	}
	for name := range p.top {
		if !ast.IsExported(name) {
			delete(p.top, name)
		}
	}
}

// typeName returns the name of a receiver or an embedded type: T, *T,
// T[P], pkg.T.
func typeName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.StarExpr:
		return typeName(e.X)
	case *ast.IndexExpr:
		return typeName(e.X)
	case *ast.IndexListExpr:
		return typeName(e.X)
	case *ast.SelectorExpr:
		return e.Sel.Name
	}
	return ""
}
