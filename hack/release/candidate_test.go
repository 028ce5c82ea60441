package main

import (
	"archive/zip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/dirhash"
)

// A tree of two published modules, the root and sub, and an untagged rig.
var testTree = map[string]string{
	"hack/release/modules.txt": "published .\npublished sub\nuntagged hack\nuntagged test\n",
	"hack/release/go.mod":      "module github.com/kubewire/kubewire/hack/release\n\ngo 1.26.0\n",
	"LICENSE":                  "license\n",
	"go.mod":                   "module github.com/kubewire/kubewire\n\ngo 1.26.0\n",
	"kubewire.go":              "package kubewire\n",
	"internal/x/x.go":          "package x\n",
	"sub/go.mod": `module github.com/kubewire/kubewire/sub

go 1.26.0

require github.com/kubewire/kubewire v0.0.0-00010101000000-000000000000

replace github.com/kubewire/kubewire => ..
`,
	"sub/go.sum":        "golang.org/x/net v0.38.0/go.mod h1:abc=\n",
	"sub/sub.go":        "package sub\n\nimport _ \"github.com/kubewire/kubewire\"\n",
	"test/rig/go.mod":   "module github.com/kubewire/kubewire/test/rig\n\ngo 1.26.0\n",
	"test/rig/rig.go":   "package rig\n",
	"test/rig/go.sum":   "",
	"sub/testdata/x.go": "package broken(\n",
}

func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, data := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestCandidate(t *testing.T) {
	const v = "v1.2.3"
	tree := writeTree(t, testTree)
	c, err := newCandidate(tree, v, t.TempDir(), false, zipTree(tree))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.problems) > 0 {
		t.Fatalf("problems: %q", c.problems)
	}
	if c.mods[0].path != repoPath || c.mods[1].path != repoPath+"/sub" {
		t.Fatalf("order: %s, %s; want the root first", c.mods[0].path, c.mods[1].path)
	}
	sub := c.mods[1]
	if want := "github.com/kubewire/kubewire v1.2.3"; !strings.Contains(string(sub.goMod), want) {
		t.Errorf("sub/go.mod lacks %q:\n%s", want, sub.goMod)
	}
	if strings.Contains(string(sub.goMod), "replace") {
		t.Errorf("sub/go.mod keeps a replace:\n%s", sub.goMod)
	}
	root := c.mods[0]
	wantSum := "github.com/kubewire/kubewire v1.2.3 " + root.sum + "\n" +
		"github.com/kubewire/kubewire v1.2.3/go.mod " + root.modSum + "\n" +
		"golang.org/x/net v0.38.0/go.mod h1:abc=\n"
	if string(sub.goSum) != wantSum {
		t.Errorf("sub/go.sum:\n%s\nwant:\n%s", sub.goSum, wantSum)
	}
	if got, _ := os.ReadFile(filepath.Join(tree, "sub", "go.sum")); string(got) != wantSum {
		t.Errorf("sub/go.sum in the tree:\n%s", got)
	}
	if h, err := dirhash.HashZip(root.zip, dirhash.Hash1); err != nil || h != root.sum {
		t.Errorf("root zip hashes %s (%v), go.sum says %s", h, err, root.sum)
	}
	// The root's zip holds neither sub nor the rig; sub's has the root's
	// LICENSE, as the go command adds it to a zip made from a tag.
	for _, tt := range []struct {
		m    *pubModule
		want []string
	}{
		{root, []string{"LICENSE", "go.mod", "internal/x/x.go", "kubewire.go"}},
		{sub, []string{"LICENSE", "go.mod", "go.sum", "sub.go", "testdata/x.go"}},
	} {
		zr, err := zip.OpenReader(tt.m.zip)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, f := range zr.File {
			got = append(got, strings.TrimPrefix(f.Name, tt.m.path+"@"+v+"/"))
		}
		zr.Close()
		sort.Strings(got)
		if strings.Join(got, " ") != strings.Join(tt.want, " ") {
			t.Errorf("zip of %s: %q, want %q", tt.m.dir, got, tt.want)
		}
	}
}

func TestCandidateProblems(t *testing.T) {
	tests := []struct {
		name string
		give map[string]string // files over testTree; "" removes one
		want string
	}{
		{
			name: "import of another module's internal package",
			give: map[string]string{"sub/sub.go": "package sub\n\nimport _ \"github.com/kubewire/kubewire/internal/x\"\n"},
			want: "sub/sub.go imports github.com/kubewire/kubewire/internal/x, internal to module github.com/kubewire/kubewire",
		},
		{
			name: "a test importing an unpublished module",
			give: map[string]string{"sub/sub_test.go": "package sub\n\nimport _ \"github.com/kubewire/kubewire/test/rig\"\n"},
			want: "sub/sub_test.go imports github.com/kubewire/kubewire/test/rig, of the unpublished module",
		},
		{
			name: "replace left in a published go.mod",
			give: map[string]string{"sub/go.mod": testTree["sub/go.mod"] + "\nreplace golang.org/x/net => golang.org/x/net v0.40.0\n"},
			want: "sub/go.mod: replace golang.org/x/net => golang.org/x/net v0.40.0: a published go.mod replaces only its published siblings",
		},
		{
			name: "sibling replaced by another directory",
			give: map[string]string{"sub/go.mod": strings.Replace(testTree["sub/go.mod"], "=> ..", "=> ../test/rig", 1)},
			want: "a published sibling is replaced by its directory, .",
		},
		{
			name: "published module requiring an unpublished one",
			give: map[string]string{"sub/go.mod": testTree["sub/go.mod"] + "\nrequire github.com/kubewire/kubewire/test/rig v0.0.0-00010101000000-000000000000\n"},
			want: "sub/go.mod requires github.com/kubewire/kubewire/test/rig: a published module may require only published ones (its directory test/rig is not published)",
		},
		{
			name: "module in neither list",
			give: map[string]string{"tracing/go.mod": "module github.com/kubewire/kubewire/tracing\n\ngo 1.26.0\n"},
			want: "tracing/go.mod: module github.com/kubewire/kubewire/tracing is neither published nor under an untagged directory",
		},
		{
			name: "import of an unpublished module",
			give: map[string]string{"sub/sub.go": "package sub\n\nimport _ \"github.com/kubewire/kubewire/test/rig\"\n"},
			want: "sub/sub.go imports github.com/kubewire/kubewire/test/rig, of the unpublished module",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files := map[string]string{}
			for k, v := range testTree {
				files[k] = v
			}
			for k, v := range tt.give {
				files[k] = v
			}
			tree := writeTree(t, files)
			c, err := newCandidate(tree, "v1.2.3", t.TempDir(), false, zipTree(tree))
			if err != nil {
				t.Fatal(err)
			}
			if len(c.problems) != 1 || !strings.Contains(c.problems[0], tt.want) {
				t.Errorf("problems: %q\nwant one with %q", c.problems, tt.want)
			}
		})
	}
}

// TestCandidateAllowsTestHelpers: a published module's test may import the
// root's internal test helpers (see checkImports).
func TestCandidateAllowsTestHelpers(t *testing.T) {
	files := map[string]string{}
	for k, v := range testTree {
		files[k] = v
	}
	files["sub/sub_test.go"] = "package sub\n\nimport _ \"github.com/kubewire/kubewire/internal/x\"\n"
	tree := writeTree(t, files)
	c, err := newCandidate(tree, "v1.2.3", t.TempDir(), false, zipTree(tree))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.problems) != 0 {
		t.Errorf("problems: %q, want none", c.problems)
	}
}

func TestCheckVersion(t *testing.T) {
	for _, tt := range []struct {
		give string
		ok   bool
	}{
		{"v0.2.0", true},
		{"v0.2.0-rc.1", true},
		{"v0.1.0-check.w1a2b3c4d", true},
		{"v1.0.0", true},
		{"0.2.0", false},
		{"v0.2", false},
		{"v2.0.0", false},
		{"v0.2.0+meta", false},
		{"v0.0.0-20260101000000-abcdefabcdef", false},
	} {
		if err := checkVersion(tt.give); (err == nil) != tt.ok {
			t.Errorf("checkVersion(%q) = %v, want ok %v", tt.give, err, tt.ok)
		}
	}
}
