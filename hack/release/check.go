package main

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
)

const (
	clientGoFloor      = "v0.34.0" // the oldest client-go kubeadapter supports (README's Install table)
	agentSandboxNewest = "v1.0.3"  // the Makefile's SANDBOX_NEWEST, the workspace's
)

// kubeModule matches what a user who imports only timeout must not get.
var kubeModule = regexp.MustCompile(`^(k8s\.io|sigs\.k8s\.io|go\.opentelemetry\.io)/|prometheus`)

type checker struct {
	work   string
	failed int
	env    []string // a user's, outside the repository
	c      *candidate
	start  time.Time
}

// runCheck checks the working tree's candidate at a version no release has;
// the checkout's hash in it keeps two checkouts' runs apart.
func runCheck(repo string, args []string) error {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	only := fs.String("only", "tabcde", "the checks to run")
	if err := fs.Parse(args); err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "kubewire-release-check-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	// The tree a commit of the working tree would hold, by a private index.
	index := []string{"GIT_INDEX_FILE=" + work + "/index"}
	var treeID string
	for _, args := range [][]string{{"read-tree", "HEAD"}, {"add", "-A"}, {"write-tree"}} {
		if err == nil {
			treeID, err = gitIn(repo, "", index, args...)
		}
	}
	if err != nil {
		return err
	}
	c, err := prepare(repo, treeID, work, fmt.Sprintf("v0.0.0-check.w%.4x", sha256.Sum256([]byte(repo))))
	if err != nil {
		return err
	}
	return check(c, filepath.Join(work, "proxy"), *only)
}

// check runs the checks named in only on the candidate in proxy, from
// users' scratch modules: no workspace, the proxy first, no checksum
// database for this repository (GOPRIVATE or GONOPROXY would send the go
// command past the proxy), no module index, which takes a version in the
// module cache to be immutable.
func check(c *candidate, proxy, only string) error {
	work, _ := os.MkdirTemp("", "kubewire-release-check-")
	defer os.RemoveAll(work)
	r := &checker{work: work, start: time.Now(), c: c}
	out, _ := exec.Command("go", "env", "GOPROXY").Output()
	// exec takes the last value of a variable set twice.
	r.env = append(os.Environ(), "GOWORK=off", "GOPROXY=file://"+proxy+","+strings.TrimSpace(string(out)),
		"GONOSUMDB="+repoPath, "GOPRIVATE=", "GONOPROXY=", "GODEBUG=goindex=0", "GOBIN="+work+"/bin", "GOFLAGS=")
	r.logf("candidate %s of %d published modules", c.version, len(c.mods))
	for _, p := range c.problems {
		r.failf("%s", p)
	}
	r.cleanCache()
	defer r.cleanCache()
	checks := []func(){r.tidy, r.timeoutOnly, r.kubeadapter, r.driver, r.install, r.everything}
	for i, name := range "tabcde" {
		if strings.ContainsRune(only, name) {
			r.start = time.Now()
			checks[i]()
		}
	}
	fmt.Printf("release-check: %d problems\n", r.failed)
	if r.failed > 0 {
		return errReported
	}
	return nil
}

// newestRelease is the newest release or pre-release tag of the root, or
// "": a version at or below it is refused, since Go orders a module's
// versions by semver and a pre-release cut below one already published
// would never be selected. It knows only the tags fetched into repo
// (RELEASING.md).
func newestRelease(repo string) (string, error) {
	tags, err := git(repo, "tag", "-l", "v*")
	latest := ""
	for _, t := range strings.Fields(tags) {
		if semver.IsValid(t) && semver.Compare(t, latest) > 0 {
			latest = t
		}
	}
	return latest, err
}

func (r *checker) logf(format string, args ...any) {
	fmt.Printf("release-check: "+format+" (%s)\n", append(args, time.Since(r.start).Round(time.Second/10))...)
}

func (r *checker) failf(format string, args ...any) {
	r.failed++
	fmt.Printf("release-check: FAIL: "+format+"\n", args...)
}

// goCmd runs the go command in dir and returns its standard output.
func (r *checker) goCmd(dir string, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command("go", args...)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, r.env, &stdout, &stderr
	if err := cmd.Run(); err != nil {
		lines := strings.Split(strings.TrimSpace(stdout.String()+stderr.String()), "\n")
		return stdout.String(), fmt.Errorf("go %s: %v\n\t%s", strings.Join(args, " "), err, strings.Join(lines[max(0, len(lines)-40):], "\n\t"))
	}
	return stdout.String(), nil
}

// cleanCache removes the candidate's modules from the module cache.
func (r *checker) cleanCache() {
	out, _ := exec.Command("go", "env", "GOMODCACHE").Output()
	cache := strings.TrimSpace(string(out))
	ev, _ := module.EscapeVersion(r.c.version)
	for _, m := range r.c.mods {
		esc, _ := module.EscapePath(m.path)
		exec.Command("chmod", "-R", "u+w", filepath.Join(cache, esc+"@"+ev)).Run()
		files, _ := filepath.Glob(filepath.Join(cache, "cache/download", esc, "@v", ev+".*"))
		for _, f := range append(files, filepath.Join(cache, esc+"@"+ev), filepath.Join(cache, "cache/download", esc, "@v/list")) {
			os.RemoveAll(f)
		}
	}
}

// user writes a user's module whose main package imports imports, runs
// go get of mods (path@version) and the go commands, and reads its graph.
func (r *checker) user(name string, mods, imports []string, cmds ...[]string) (string, map[string]string, error) {
	dir := filepath.Join(r.work, "scratch", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return dir, nil, err
	}
	err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/"+name+"\n\ngo 1.26.0\n"), 0o644)
	if err == nil && len(imports) > 0 {
		main := "package main\n\nimport (\n"
		for _, i := range imports {
			main += fmt.Sprintf("\t_ %q\n", i)
		}
		err = os.WriteFile(filepath.Join(dir, "main.go"), []byte(main+")\n\nfunc main() {}\n"), 0o644)
	}
	steps := append([][]string{append([]string{"get"}, mods...)}, cmds...)
	var out string
	for _, args := range append(steps, []string{"list", "-m", "all"}) {
		if err == nil {
			out, err = r.goCmd(dir, args...)
		}
	}
	g := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
		if f := strings.Fields(line); len(f) >= 2 {
			g[f[0]] = f[1]
		}
	}
	return dir, g, err
}

// Every build here is -race, as the suite's are: the graphs are the ones
// the matrix legs build (kubeadapter beside client-go v0.34.0, the driver
// at its floor), so a cold machine compiles each once. -race changes how
// a package compiles, not which modules a user's go get resolves, which
// is what these checks are about.
var tidyBuild = [][]string{{"mod", "tidy"}, {"build", "-race", "./..."}}

// tidy is (t): in the release tree, go mod tidy changes no published go.mod
// or go.sum (a missing checksum breaks go install).
func (r *checker) tidy() {
	for _, m := range r.c.mods {
		if _, err := r.goCmd(filepath.Join(r.c.tree, m.dir), "mod", "tidy", "-diff"); err != nil {
			r.failf("(t) %s: go.mod or go.sum is not what go mod tidy makes of it: %v", m.dir, err)
		}
	}
	r.logf("(t) %d published go.mods, requiring their siblings at %s: tidy", len(r.c.mods), r.c.version)
}

// timeoutOnly is (a): importing only timeout brings no Kubernetes,
// Prometheus or OpenTelemetry module.
func (r *checker) timeoutOnly() {
	_, g, err := r.user("timeout", []string{repoPath + "@" + r.c.version}, []string{repoPath + "/timeout"}, tidyBuild...)
	var bad []string
	for p, v := range g {
		if kubeModule.MatchString(p) {
			bad = append(bad, p+" "+v)
		}
	}
	if err != nil || len(bad) > 0 {
		r.failf("(a) importing only timeout: %v; brings %s", err, strings.Join(bad, ", "))
	}
	r.logf("(a) go get %s@%s, import timeout: builds, %d modules", repoPath, r.c.version, len(g))
}

// kubeadapter is (b): beside the oldest client-go it supports, kubeadapter
// builds and raises no module of the user's graph with client-go alone.
func (r *checker) kubeadapter() {
	clientGo := []string{"k8s.io/client-go@" + clientGoFloor, "k8s.io/api@" + clientGoFloor, "k8s.io/apimachinery@" + clientGoFloor}
	_, alone, err := r.user("clientgo", clientGo, []string{"k8s.io/client-go/rest"}, tidyBuild...)
	_, g, err2 := r.user("kubeadapter", append(clientGo, repoPath+"/kubeadapter@"+r.c.version), []string{repoPath + "/kubeadapter", "k8s.io/client-go/rest"}, tidyBuild...)
	if err = errors.Join(err, err2); err != nil {
		r.failf("(b) kubeadapter beside client-go %s: %v", clientGoFloor, err)
	}
	for p, had := range alone {
		if got := g[p]; semver.Compare(got, had) > 0 {
			r.failf("(b) kubeadapter raises the user's %s %s to %s", p, had, got)
		}
	}
	r.logf("(b) go get kubeadapter@%s beside client-go %s: builds, %d modules", r.c.version, clientGoFloor, len(g))
}

// driver is (c): go get -t of the driver's packages selects every module
// at the version driver/go.mod states (its floor, which the workspace never
// builds), or beside agentSandboxNewest that one, and its packages and
// tests compile there. The tests run elsewhere: at the floor in the
// Makefile's sandboxes leg, at the same versions; beside the newest in the
// workspace run, whose graph differs from this one in patch releases only
// (client-go v0.37.2 for v0.37.0). Running them here too would run the
// floor's suite twice.
func (r *checker) driver() {
	m := r.c.byPath[repoPath+"/driver"]
	if m == nil {
		r.failf("(c) the driver is not published")
		return
	}
	f, _ := modfile.ParseLax("go.mod", m.goMod, nil)
	for _, sandbox := range []string{"", agentSandboxNewest} {
		r.start = time.Now()
		get := []string{"-t", m.path + "/...@" + r.c.version}
		if sandbox != "" {
			get = append(get, "sigs.k8s.io/agent-sandbox@"+sandbox)
		}
		dir, g, err := r.user("driver"+sandbox, get, nil)
		out := ""
		if err == nil {
			out, err = r.goCmd(dir, "test", "-race", "-mod=mod", "-count=1", "-run=^$", m.path+"/...")
		}
		for _, req := range f.Require {
			p, want := req.Mod.Path, req.Mod.Version
			if sandbox != "" {
				p, want = "sigs.k8s.io/agent-sandbox", sandbox
			}
			if g[p] != want && !inRepo(p) && err == nil {
				err = fmt.Errorf("it selects %s %q, want %s", p, g[p], want)
			}
		}
		if err != nil {
			r.failf("(c) go get -t %s: %v", strings.Join(get[1:], " "), err)
		}
		r.logf("(c) go get -t %s: %d packages and their tests build", strings.Join(get[1:], " "), strings.Count("\n"+out, "\nok "))
	}
}

// install is (d): go install of the command at the candidate, as a user
// runs it (no -mod flag; -race as above), and its probe's help.
func (r *checker) install() {
	p := repoPath + "/cmd/kubewire@" + r.c.version
	_, err := r.goCmd(r.work, "install", "-race", p)
	out, _ := exec.Command(filepath.Join(r.work, "bin", "kubewire"), "probe", "-h").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "usage: kubewire probe") {
		r.failf("(d) go install %s, kubewire probe -h: %v\n%s", p, err, out)
	}
	r.logf("(d) go install %s: kubewire probe -h prints its usage, %d flags", p, strings.Count(string(out), "\n  -"))
}

// everything is (e): every published module's packages build together in
// one user's module, metrics' too, which no audience above imports.
func (r *checker) everything() {
	var mods []string
	for _, m := range r.c.mods {
		mods = append(mods, m.path+"@"+r.c.version)
	}
	if _, _, err := r.user("all", mods, nil, []string{"build", "-race", "-mod=mod", repoPath + "/..."}); err != nil {
		r.failf("(e) %v", err)
	} else {
		r.logf("(e) every published module@%s in one user's module: all packages build", r.c.version)
	}
}
