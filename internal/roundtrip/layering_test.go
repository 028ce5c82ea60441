package roundtrip_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/kubewire/kubewire"

// middleware are the packages of the root module's layer: transport is the
// floor, and the others build on it without importing each other. What they
// share lives here, in internal/roundtrip.
var middleware = []string{module + "/transport", module + "/timeout", module + "/pooltrace", module + "/retry"}

// listed is what go list says of a package.
type listed struct {
	ImportPath string
	Standard   bool
	Imports    []string
	Deps       []string
}

// TestLayering guards the layering CONTRIBUTING.md states: no middleware package
// imports a sibling, client-go, Prometheus or OpenTelemetry, even through
// an internal package; and transport, the floor, reaches nothing but the standard
// library, x/net, go-cleanhttp and the root module's internal packages.
// Test files are not checked: a test may compose the layers.
func TestLayering(t *testing.T) {
	pkgs := goList(t, middleware)
	for _, m := range middleware {
		p, ok := pkgs[m]
		if !ok {
			t.Fatalf("go list did not report %s", m)
		}
		for _, d := range p.Deps {
			switch {
			case slices.Contains(middleware, d) && d != module+"/transport":
				t.Errorf("%s imports the middleware %s; share code through internal/ instead", m, d)
			case strings.HasPrefix(d, "k8s.io/") || strings.HasPrefix(d, "sigs.k8s.io/"):
				t.Errorf("%s imports %s: only kubeadapter knows client-go", m, d)
			case strings.Contains(d, "prometheus"):
				t.Errorf("%s imports %s: metrics sit above the middleware, fed by observers", m, d)
			case strings.HasPrefix(d, "go.opentelemetry.io/"):
				t.Errorf("%s imports %s: tracing sits above the middleware, fed by observers", m, d)
			}
		}
	}

	// transport's own imports, and those of the module's packages it
	// reaches, stay within the floor's allowance.
	tr := pkgs[module+"/transport"]
	for _, path := range append([]string{tr.ImportPath}, tr.Deps...) {
		p := pkgs[path]
		if p.Standard || !strings.HasPrefix(path, module+"/") {
			continue
		}
		for _, imp := range p.Imports {
			if !floorAllows(pkgs, imp) {
				t.Errorf("%s (reached from transport) imports %s: transport may import only the standard library, golang.org/x/net, go-cleanhttp and %s/internal", path, imp, module)
			}
		}
	}
}

func floorAllows(pkgs map[string]listed, imp string) bool {
	return pkgs[imp].Standard ||
		strings.HasPrefix(imp, "golang.org/x/net/") ||
		imp == "github.com/hashicorp/go-cleanhttp" ||
		strings.HasPrefix(imp, module+"/internal/")
}

// goList returns go list's view of the packages and everything they depend
// on, by import path. It runs the go command the test runs under.
func goList(t *testing.T, patterns []string) map[string]listed {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-deps", "-json=ImportPath,Standard,Imports,Deps"}, patterns...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	pkgs := map[string]listed{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listed
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decoding go list's output: %v", err)
		}
		pkgs[p.ImportPath] = p
	}
	return pkgs
}

// publishedModules returns the modules users require, as
// hack/release/modules.txt lists them for the release. Their packages,
// tests aside, import no package internal to another module: minimal
// version selection may pair kubeadapter vN with root vN+1, and an
// internal package is free to change between them.
func publishedModules(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "hack", "release", "modules.txt"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "published" {
			out = append(out, strings.TrimSuffix(module+"/"+strings.TrimPrefix(f[1], "."), "/"))
		}
	}
	if len(out) < 5 {
		t.Fatalf("modules.txt lists %d published modules: %q", len(out), out)
	}
	return out
}

// TestModuleBoundaries fails on a published module's package that reaches
// a package under another module's internal/, directly or through a
// dependency.
func TestModuleBoundaries(t *testing.T) {
	published := publishedModules(t)
	var patterns []string
	for _, m := range published {
		patterns = append(patterns, m+"/...")
	}
	cmd := exec.Command("go", append([]string{"list", "-deps", "-json=ImportPath,Module,Imports"}, patterns...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	type pkg struct {
		ImportPath string
		Module     *struct{ Path string }
		Imports    []string
	}
	pkgs := map[string]pkg{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decoding go list's output: %v", err)
		}
		pkgs[p.ImportPath] = p
	}
	modOf := func(path string) string {
		if p, ok := pkgs[path]; ok && p.Module != nil {
			return p.Module.Path
		}
		return ""
	}
	checked := 0
	for path, p := range pkgs {
		m := modOf(path)
		if !slices.Contains(published, m) {
			continue
		}
		checked++
		for _, imp := range p.Imports {
			im := modOf(imp)
			if im != "" && im != m && isInternal(imp) {
				t.Errorf("%s (module %s) imports %s, internal to module %s: make it public API of %s, or generate a copy into %s from a template in hack/shared (targets.txt)", path, m, imp, im, im, m)
			}
		}
	}
	if checked < len(published) {
		t.Fatalf("go list reported %d packages of the published modules %v", checked, published)
	}
}

// isInternal reports whether an import path has an internal element.
func isInternal(path string) bool {
	return slices.Contains(strings.Split(path, "/"), "internal")
}

// TestPublishedRequires fails on a published go.mod that requires a module
// of this repository users never get: a test rig or an example. A rig
// required there would have to be tagged like an API, and would show up in
// every user's module graph.
func TestPublishedRequires(t *testing.T) {
	published := publishedModules(t)
	for _, m := range published {
		out, err := exec.Command("go", "list", "-m", "-f", "{{.GoMod}}", m).Output()
		if err != nil {
			t.Fatalf("go list -m %s: %v", m, err)
		}
		gomod := strings.TrimSpace(string(out))
		out, err = exec.Command("go", "mod", "edit", "-json", gomod).Output()
		if err != nil {
			t.Fatalf("go mod edit -json %s: %v", gomod, err)
		}
		var f struct{ Require []struct{ Path string } }
		if err := json.Unmarshal(out, &f); err != nil {
			t.Fatal(err)
		}
		for _, r := range f.Require {
			if (r.Path == module || strings.HasPrefix(r.Path, module+"/")) && !slices.Contains(published, r.Path) {
				t.Errorf("%s requires %s, which is not published: move the tests that need it to a module under test/", gomod, r.Path)
			}
		}
	}
}
