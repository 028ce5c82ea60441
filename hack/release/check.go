package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	"golang.org/x/mod/zip"
)

// clientGoFloor is the oldest client-go release kubeadapter supports (the
// README's Install table): beside it, kubeadapter raises no module of the
// user's graph.
const clientGoFloor = "v0.34.0"

// agentSandboxNewest is the newest agent-sandbox release the driver
// supports, the newest of the Makefile's SANDBOX_RELEASES: (c) tests the
// driver beside it as well as at its floor.
const agentSandboxNewest = "v1.0.3"

// Modules whose selected versions the report shows, where a graph has them.
var headline = []struct{ label, path string }{
	{"client-go", "k8s.io/client-go"},
	{"api", "k8s.io/api"},
	{"apimachinery", "k8s.io/apimachinery"},
	{"controller-runtime", "sigs.k8s.io/controller-runtime"},
	{"agent-sandbox", "sigs.k8s.io/agent-sandbox"},
	{"client_golang", "github.com/prometheus/client_golang"},
	{"otel", "go.opentelemetry.io/otel"},
	{"x/net", "golang.org/x/net"},
	{"logr", "github.com/go-logr/logr"},
}

// kubeModule matches the modules a user who imports only timeout must not
// get: Kubernetes', Prometheus' and OpenTelemetry's.
var kubeModule = regexp.MustCompile(`^(k8s\.io|sigs\.k8s\.io|go\.opentelemetry\.io)/|prometheus`)

func runCheck(repo string, args []string) error {
	fs := flagSet("check", "[-tags V] [-keep] [-v] [-only tabcde]")
	tags := fs.String("tags", "", "check the release tagged `V` (as the public proxy zips it) instead of the working tree")
	keep := fs.Bool("keep", false, "keep the proxy and the scratch modules, and print where")
	verbose := fs.Bool("v", false, "print each graph and the driver's test output")
	version := fs.String("version", "", "the candidate's version (default: the next minor release, as a pre-release named after the content and the checkout)")
	only := fs.String("only", "tabcde", "the checks to run: t (the tagged tree), a, b, c, d, e")
	if err := fs.Parse(args); err != nil || fs.NArg() != 0 {
		fs.Usage()
		return errReported
	}
	start := time.Now()
	work, err := os.MkdirTemp("", "kubewire-release-check-")
	if err != nil {
		return err
	}
	if *keep {
		defer fmt.Printf("release-check: kept %s; its scratch modules build with GOWORK=off GOFLAGS=-mod=mod GOPROXY=file://%s/proxy,$(go env GOPROXY) GONOSUMDB=%s GOPRIVATE=\n", work, work, repoPath)
	} else {
		defer os.RemoveAll(work)
	}
	// A version given, or a release's, may have had other content in an
	// earlier run: the go command then indexes the candidate's modules
	// afresh (see worktreeCandidate).
	r := &checker{work: work, verbose: *verbose, noIndex: *tags != "" || *version != ""}

	var c *candidate
	when := time.Now()
	from := "the working tree"
	if *tags != "" {
		from = "the tags of " + *tags
		c, when, err = fromTags(repo, *tags, work)
	} else {
		if *version != "" {
			c, err = fromWorktree(repo, *version, work)
		} else {
			c, err = worktreeCandidate(repo, work)
		}
	}
	if err != nil {
		return err
	}
	proxy := filepath.Join(work, "proxy")
	if err := writeProxy(proxy, c, when); err != nil {
		return err
	}
	dirs := make([]string, len(c.mods))
	for i, m := range c.mods {
		dirs[i] = m.dir
	}
	r.logf(start, "candidate %s of %d published modules (%s) from %s, in a file:// proxy; %d untagged modules (%s)",
		c.version, len(c.mods), strings.Join(dirs, ", "), from, len(c.untagged), strings.Join(c.untagged, ", "))
	for _, p := range c.problems {
		r.failf("%s", p)
	}

	if err := r.setEnv(proxy); err != nil {
		return err
	}
	// A module cache entry of the candidate from an earlier run would mask
	// this one.
	r.cleanCache(c)
	defer r.cleanCache(c)

	for _, step := range []struct {
		letter string
		run    func(*candidate)
	}{
		{"t", r.taggedTree},
		{"a", r.timeoutOnly},
		{"b", r.kubeadapter},
		{"c", r.driver},
		{"d", r.install},
		{"e", r.everything},
	} {
		if strings.Contains(*only, step.letter) {
			step.run(c)
		}
	}

	if r.failed > 0 {
		fmt.Printf("release-check: FAIL: %d problems, in %s\n", r.failed, since(start))
		return errReported
	}
	fmt.Printf("release-check: ok in %s\n", since(start))
	return nil
}

// nextMinor is the next minor release after the newest tag of the root.
func nextMinor(repo string) string {
	latest := ""
	out, _ := git(repo, "tag", "-l", "v*")
	for _, t := range strings.Fields(out) {
		if semver.IsValid(t) && semver.Prerelease(t) == "" && (latest == "" || semver.Compare(t, latest) > 0) {
			latest = t
		}
	}
	if latest == "" {
		return "v0.1.0"
	}
	minor, _ := strconv.Atoi(strings.Split(semver.MajorMinor(latest), ".")[1])
	return fmt.Sprintf("%s.%d.0", semver.Major(latest), minor+1)
}

// worktreeCandidate builds the candidate from the working tree at the next
// minor release, as a pre-release named after its content and the
// checkout: v0.1.0-check.c<content>.w<checkout>.
//
// The go command takes a module in its cache to be immutable: it indexes
// the module's packages once, in the build cache, by the module's directory
// (cmd/go/internal/modindex), and an entry from another content at the same
// version would mask the tree (an import added since would be missing). So
// the version changes with the content; the same content keeps its version,
// and the build cache serves it. The checkout's part keeps two checkouts'
// runs at the same time apart: each removes its candidate from the module
// cache when done.
func worktreeCandidate(repo, work string) (*candidate, error) {
	base := nextMinor(repo)
	draft := filepath.Join(work, "draft")
	if err := os.Mkdir(draft, 0o755); err != nil {
		return nil, err
	}
	c, err := fromWorktree(repo, base+"-check", draft)
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	for _, m := range c.mods {
		fmt.Fprintf(h, "%s %s %s\n", m.path, m.sum, m.modSum)
	}
	v := fmt.Sprintf("%s-check.c%.4x.w%.4x", base, h.Sum(nil), sha256.Sum256([]byte(repo)))
	if err := os.RemoveAll(draft); err != nil {
		return nil, err
	}
	return fromWorktree(repo, v, work)
}

type checker struct {
	work    string
	verbose bool
	failed  int
	// env is a user's outside the repository: no workspace, the candidate's
	// proxy first, no checksum database for this repository's modules.
	env      []string
	modCache string
	noIndex  bool
}

func since(t time.Time) string { return time.Since(t).Round(100 * time.Millisecond).String() }

func (r *checker) logf(start time.Time, format string, args ...any) {
	fmt.Printf("release-check: "+format+" (%s)\n", append(args, since(start))...)
}

func (r *checker) failf(format string, args ...any) {
	r.failed++
	fmt.Printf("release-check: FAIL: "+format+"\n", args...)
}

func (r *checker) setEnv(proxy string) error {
	goproxy, err := goEnv("GOPROXY")
	if err != nil {
		return err
	}
	if r.modCache, err = goEnv("GOMODCACHE"); err != nil {
		return err
	}
	drop := map[string]bool{"GODEBUG": r.noIndex, "GOWORK": true, "GOFLAGS": true, "GOPROXY": true, "GONOSUMDB": true, "GOPRIVATE": true, "GONOPROXY": true, "GOBIN": true}
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); !drop[k] {
			r.env = append(r.env, kv)
		}
	}
	// GOPRIVATE or GONOPROXY matching this repository would send the go
	// command past the proxy to the VCS.
	r.env = append(r.env, "GOWORK=off", "GOPROXY=file://"+proxy+","+goproxy, "GONOSUMDB="+repoPath, "GOPRIVATE=", "GONOPROXY=")
	if r.noIndex {
		godebug := os.Getenv("GODEBUG")
		if godebug != "" {
			godebug += ","
		}
		r.env = append(r.env, "GODEBUG="+godebug+"goindex=0")
	}
	return nil
}

func goEnv(name string) (string, error) {
	out, err := exec.Command("go", "env", name).Output()
	return strings.TrimSpace(string(out)), err
}

// goCmd runs the go command in dir, with GOFLAGS=-mod=mod unless plain, and
// returns its standard output.
func (r *checker) goCmd(dir string, plain bool, args ...string) (string, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(cmd.Env, r.env...)
	if plain {
		cmd.Env = append(cmd.Env, "GOFLAGS=")
	} else {
		cmd.Env = append(cmd.Env, "GOFLAGS=-mod=mod")
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("go %s: %v\n%s%s", strings.Join(args, " "), err, tail(stdout.String(), 30), tail(stderr.String(), 30))
	}
	return stdout.String(), nil
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{"\t..."}, lines[len(lines)-n:]...)
	}
	if len(lines) == 1 && lines[0] == "" {
		return ""
	}
	return "\t" + strings.Join(lines, "\n\t") + "\n"
}

// cleanCache removes the candidate's modules from the module cache.
func (r *checker) cleanCache(c *candidate) {
	ev, _ := module.EscapeVersion(c.version)
	for _, m := range c.mods {
		esc, _ := module.EscapePath(m.path)
		dir := filepath.Join(r.modCache, filepath.FromSlash(esc)+"@"+ev)
		filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				os.Chmod(p, 0o755)
			}
			return nil
		})
		os.RemoveAll(dir)
		dl := filepath.Join(r.modCache, "cache", "download", filepath.FromSlash(esc), "@v")
		files, _ := filepath.Glob(filepath.Join(dl, ev+".*"))
		for _, f := range files {
			os.Remove(f)
		}
		if list, err := os.ReadFile(filepath.Join(dl, "list")); err == nil {
			var keep []string
			for _, v := range strings.Fields(string(list)) {
				if v != c.version {
					keep = append(keep, v)
				}
			}
			if len(keep) == 0 {
				os.Remove(filepath.Join(dl, "list"))
			} else {
				os.WriteFile(filepath.Join(dl, "list"), []byte(strings.Join(keep, "\n")+"\n"), 0o644)
			}
		}
		removeEmpty(filepath.Dir(dir), r.modCache)
		removeEmpty(dl, r.modCache)
	}
}

// removeEmpty removes dir and its parents up to top while they are empty.
func removeEmpty(dir, top string) {
	for strings.HasPrefix(dir, top+string(filepath.Separator)) && os.Remove(dir) == nil {
		dir = filepath.Dir(dir)
	}
}

// scratch writes a user's module requiring mods (path@version) whose main
// package imports imports.
func (r *checker) scratch(name string, mods, imports []string) (string, error) {
	dir := filepath.Join(r.work, "scratch", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "module example.com/%s\n\ngo 1.26.0\n", name)
	for _, m := range mods {
		p, v, _ := strings.Cut(m, "@")
		fmt.Fprintf(&b, "\nrequire %s %s\n", p, v)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(b.String()), 0o644); err != nil {
		return "", err
	}
	if len(imports) == 0 {
		return dir, nil
	}
	b.Reset()
	b.WriteString("package main\n\nimport (\n")
	for _, i := range imports {
		fmt.Fprintf(&b, "\t_ %q\n", i)
	}
	b.WriteString(")\n\nfunc main() {}\n")
	return dir, os.WriteFile(filepath.Join(dir, "main.go"), []byte(b.String()), 0o644)
}

// graph is `go list -m all` of a module: selected versions by path, the
// main module left out.
type graph struct {
	order    []string
	versions map[string]string
}

func (r *checker) graph(dir string) (*graph, error) {
	out, err := r.goCmd(dir, false, "list", "-m", "all")
	if err != nil {
		return nil, err
	}
	g := &graph{versions: map[string]string{}}
	for i, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if i == 0 || len(f) < 2 {
			continue
		}
		g.order = append(g.order, f[0])
		g.versions[f[0]] = f[1]
	}
	return g, nil
}

// headline lists the selected versions of the modules worth a look.
func (g *graph) headline() string {
	var s []string
	for _, h := range headline {
		if v, ok := g.versions[h.path]; ok {
			s = append(s, h.label+" "+v)
		}
	}
	return strings.Join(s, ", ")
}

func (r *checker) printGraph(name string, g *graph) {
	if !r.verbose {
		return
	}
	for _, p := range g.order {
		fmt.Printf("release-check:   %s: %s %s\n", name, p, g.versions[p])
	}
}

// build tidies a scratch module, builds it and reads its graph.
func (r *checker) build(name string, mods, imports []string) (*graph, error) {
	dir, err := r.scratch(name, mods, imports)
	if err != nil {
		return nil, err
	}
	if _, err := r.goCmd(dir, false, "mod", "tidy"); err != nil {
		return nil, err
	}
	if _, err := r.goCmd(dir, false, "build", "./..."); err != nil {
		return nil, err
	}
	g, err := r.graph(dir)
	if err == nil {
		r.printGraph(name, g)
	}
	return g, err
}

// taggedTree checks each published module as a clone of the release commit
// has it: go mod tidy, on its own, changes neither its go.mod nor its
// go.sum (a missing checksum breaks a build at the tag and go install).
func (r *checker) taggedTree(c *candidate) {
	start := time.Now()
	ok := 0
	for _, m := range c.mods {
		dir := filepath.Join(r.work, "unzipped", m.dir)
		if err := zip.Unzip(dir, module.Version{Path: m.path, Version: c.version}, m.zip); err != nil {
			r.failf("tagged tree: %s: %v", m.dir, err)
			continue
		}
		if _, err := r.goCmd(dir, true, "mod", "tidy", "-diff"); err != nil {
			r.failf("tagged tree: %s: go.mod or go.sum is not what go mod tidy makes of it: %v", m.dir, err)
			continue
		}
		ok++
	}
	r.logf(start, "tagged tree: %d/%d go.mods require their siblings at %s with no replace, tidy with their go.sums", ok, len(c.mods), c.version)
}

// timeoutOnly is (a): a user who imports only timeout gets no Kubernetes,
// Prometheus or OpenTelemetry module.
func (r *checker) timeoutOnly(c *candidate) {
	start := time.Now()
	g, err := r.build("timeout", []string{repoPath + "@" + c.version}, []string{repoPath + "/timeout"})
	if err != nil {
		r.failf("(a) timeout: %v", err)
		return
	}
	var bad []string
	for _, p := range g.order {
		if kubeModule.MatchString(p) {
			bad = append(bad, p+" "+g.versions[p])
		}
	}
	if len(bad) > 0 {
		r.failf("(a) importing only timeout brings %s", strings.Join(bad, ", "))
	}
	r.logf(start, "(a) go get %s@%s, import timeout: builds; %d modules, %d from k8s.io, sigs.k8s.io, Prometheus or OpenTelemetry; %s",
		repoPath, c.version, len(g.order), len(bad), g.headline())
}

// kubeadapter is (b): beside the oldest client-go it supports, kubeadapter
// builds and raises no module of the graph the user had with client-go
// alone.
func (r *checker) kubeadapter(c *candidate) {
	start := time.Now()
	clientGo := []string{"k8s.io/client-go@" + clientGoFloor, "k8s.io/api@" + clientGoFloor, "k8s.io/apimachinery@" + clientGoFloor}
	alone, err := r.build("clientgo", clientGo, []string{"k8s.io/client-go/rest"})
	if err != nil {
		r.failf("(b) client-go %s alone: %v", clientGoFloor, err)
		return
	}
	g, err := r.build("kubeadapter", append(clientGo, repoPath+"/kubeadapter@"+c.version), []string{repoPath + "/kubeadapter", "k8s.io/client-go/rest"})
	if err != nil {
		r.failf("(b) kubeadapter beside client-go %s: %v", clientGoFloor, err)
		return
	}
	raised := 0
	for _, p := range alone.order {
		had, got := alone.versions[p], g.versions[p]
		if got != "" && semver.Compare(got, had) > 0 {
			raised++
			r.failf("(b) kubeadapter raises the user's %s %s to %s", p, had, got)
		}
	}
	r.logf(start, "(b) go get kubeadapter@%s beside client-go %s: builds; %d modules (%d with client-go alone), %d raised; %s",
		c.version, clientGoFloor, len(g.order), len(alone.order), raised, g.headline())
}

// driver is (c): a user's build of the driver selects every module at the
// version driver/go.mod states, and the driver's tests pass there: its
// floor, which the workspace never builds. They pass beside
// agentSandboxNewest too.
func (r *checker) driver(c *candidate) {
	m := c.module(repoPath + "/driver")
	if m == nil {
		r.failf("(c) the driver is not published")
		return
	}
	r.driverBeside(c, m, "")
	r.driverBeside(c, m, agentSandboxNewest)
}

// driverBeside gets the driver with its tests' dependencies into a user's
// module, beside agent-sandbox at sandbox, or at the driver's floor if
// sandbox is empty, and runs the driver's tests there.
func (r *checker) driverBeside(c *candidate, m *pubModule, sandbox string) {
	start := time.Now()
	name, what, get := "driver", "driver/...@"+c.version, []string{"get", "-t", m.path + "/...@" + c.version}
	if sandbox != "" {
		name, what, get = "driver-sandbox", what+" beside agent-sandbox "+sandbox, append(get, "sigs.k8s.io/agent-sandbox@"+sandbox)
	}
	dir, err := r.scratch(name, []string{m.path + "@" + c.version}, nil)
	if err != nil {
		r.failf("(c) %v", err)
		return
	}
	if _, err := r.goCmd(dir, false, get...); err != nil {
		r.failf("(c) %v", err)
		return
	}
	g, err := r.graph(dir)
	if err != nil {
		r.failf("(c) %v", err)
		return
	}
	r.printGraph(name, g)
	stated := ""
	if sandbox != "" {
		if got := g.versions["sigs.k8s.io/agent-sandbox"]; got != sandbox {
			r.failf("(c) go get -t %s selects agent-sandbox %s", what, got)
		}
	} else {
		f, err := modfile.ParseLax("driver/go.mod", m.goMod, nil)
		if err != nil {
			r.failf("(c) %v", err)
			return
		}
		same := 0
		for _, req := range f.Require {
			switch got := g.versions[req.Mod.Path]; {
			case inRepo(req.Mod.Path):
			case got == "":
				r.failf("(c) driver/go.mod states %s %s, a user's build of the driver has none", req.Mod.Path, req.Mod.Version)
			case got == req.Mod.Version:
				same++
			default:
				r.failf("(c) driver/go.mod states %s %s, a user's build of the driver selects %s", req.Mod.Path, req.Mod.Version, got)
			}
		}
		stated = fmt.Sprintf(", %d as driver/go.mod states them", same)
	}
	r.logf(start, "(c) go get -t %s: %d modules%s; %s", what, len(g.order), stated, g.headline())

	start = time.Now()
	cmd := exec.Command("go", "test", "-json", "-count=1", m.path+"/...")
	cmd.Dir = dir
	cmd.Env = append(append(cmd.Env, r.env...), "GOFLAGS=-mod=mod")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		r.failf("(c) %v", err)
		return
	}
	if err := cmd.Start(); err != nil {
		r.failf("(c) %v", err)
		return
	}
	res := readTestJSON(out, r.verbose)
	werr := cmd.Wait()
	for _, p := range res.failed {
		r.failf("(c) go test %s: %s:\n%s", what, p, tail(res.output[p], 40))
	}
	if werr != nil && len(res.failed) == 0 {
		r.failf("(c) go test %s: %v\n%s", what, werr, tail(stderr.String(), 30))
	}
	skipped := ""
	if len(res.skipped) > 0 {
		skipped = fmt.Sprintf(" (%s)", strings.Join(res.skipped, ", "))
	}
	r.logf(start, "(c) go test %s there: %d packages ok (slowest %s, %.1fs), %d failed, %d without tests; %d tests passed, %d failed, %d skipped%s",
		what, res.pkgOK, res.slowestPkg, res.slowest, len(res.failed), res.pkgNoTests, res.passed, res.testsFailed, len(res.skipped), skipped)
}

type testResult struct {
	pkgOK, pkgNoTests   int
	passed, testsFailed int
	failed, skipped     []string
	output              map[string]string // by package
	slowest             float64           // seconds
	slowestPkg          string
}

// readTestJSON reads go test -json: package results and top-level tests.
func readTestJSON(r io.Reader, verbose bool) *testResult {
	res := &testResult{output: map[string]string{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var e struct {
			Action, Package, Test, Output, ImportPath string
			Elapsed                                   float64
		}
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			continue
		}
		pkg := e.Package
		if pkg == "" {
			pkg = e.ImportPath
		}
		if e.Action == "output" || e.Action == "build-output" {
			if verbose {
				fmt.Print("release-check:   " + e.Output)
			}
			if len(res.output[pkg]) < 1<<20 {
				res.output[pkg] += e.Output
			}
			continue
		}
		top := e.Test != "" && !strings.Contains(e.Test, "/")
		switch {
		case e.Test == "" && e.Action == "pass":
			res.pkgOK++
			if e.Elapsed > res.slowest {
				res.slowest, res.slowestPkg = e.Elapsed, strings.TrimPrefix(pkg, repoPath+"/")
			}
		case e.Test == "" && e.Action == "skip":
			res.pkgNoTests++
		case e.Test == "" && e.Action == "fail":
			res.failed = append(res.failed, pkg)
		case top && e.Action == "pass":
			res.passed++
		case top && e.Action == "fail":
			res.testsFailed++
		case top && e.Action == "skip":
			res.skipped = append(res.skipped, strings.TrimPrefix(pkg, repoPath+"/")+"."+e.Test)
		}
	}
	sort.Strings(res.failed)
	return res
}

// install is (d): go install of the command at the candidate, as a user
// runs it (no -mod flag), and its probe's help.
func (r *checker) install(c *candidate) {
	start := time.Now()
	m := c.module(repoPath + "/cmd/kubewire")
	if m == nil {
		r.failf("(d) cmd/kubewire is not published")
		return
	}
	bin := filepath.Join(r.work, "bin")
	r.env = append(r.env, "GOBIN="+bin)
	defer func() { r.env = r.env[:len(r.env)-1] }()
	if _, err := r.goCmd(r.work, true, "install", m.path+"@"+c.version); err != nil {
		r.failf("(d) %v", err)
		return
	}
	cmd := exec.Command(filepath.Join(bin, "kubewire"), "probe", "-h")
	out, err := cmd.CombinedOutput()
	flags := 0
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "  -") {
			flags++
		}
	}
	switch {
	case err != nil:
		r.failf("(d) kubewire probe -h: %v\n%s", err, tail(string(out), 20))
	case !strings.HasPrefix(string(out), "usage: kubewire probe"):
		r.failf("(d) kubewire probe -h does not print its usage:\n%s", tail(string(out), 20))
	}
	r.logf(start, "(d) go install %s@%s: kubewire probe -h prints its usage, %d flags", m.path, c.version, flags)
}

// everything is (e): a user's module requiring every published module at
// the candidate builds all their packages, metrics' too, which no audience
// above imports.
func (r *checker) everything(c *candidate) {
	start := time.Now()
	var mods []string
	for _, m := range c.mods {
		mods = append(mods, m.path+"@"+c.version)
	}
	dir, err := r.scratch("all", mods, nil)
	if err != nil {
		r.failf("(e) %v", err)
		return
	}
	out, err := r.goCmd(dir, false, "list", repoPath+"/...")
	if err != nil {
		r.failf("(e) %v", err)
		return
	}
	if _, err := r.goCmd(dir, false, "build", repoPath+"/..."); err != nil {
		r.failf("(e) %v", err)
		return
	}
	g, err := r.graph(dir)
	if err != nil {
		r.failf("(e) %v", err)
		return
	}
	r.logf(start, "(e) every published module@%s in one user's module: their %d packages build together; %d modules; %s",
		c.version, len(strings.Fields(out)), len(g.order), g.headline())
}
