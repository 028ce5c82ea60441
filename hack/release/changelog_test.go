package main

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// `go test -run TestChangelog -args -changelog FILE` checks another file,
// such as an older CHANGELOG.md (git show REV:CHANGELOG.md > FILE).
var changelogFile = flag.String("changelog", "../../CHANGELOG.md", "the CHANGELOG.md that TestChangelog checks")

// TestChangelog holds the repository's CHANGELOG.md to its form
// (changelog.go), with the published modules of modules.txt: make test
// runs it.
func TestChangelog(t *testing.T) {
	data, err := os.ReadFile(filepath.Base(modulesFile))
	if err != nil {
		t.Fatal(err)
	}
	mods, _, err := parseModules(data)
	if err != nil {
		t.Fatal(err)
	}
	var published []string
	for _, m := range mods {
		published = append(published, m.path)
	}
	changelog, err := os.ReadFile(*changelogFile)
	if err != nil {
		t.Fatal(err)
	}
	problems := checkChangelog(string(changelog), published)
	for _, p := range problems {
		t.Error(p)
	}
	if len(problems) > 0 {
		t.Logf("%s: %d problems. The published modules: %s. RELEASING.md says how to write an entry.", *changelogFile, len(problems), strings.Join(published, ", "))
	}
}

func TestChangelogForm(t *testing.T) {
	const (
		root = repoPath
		sub  = repoPath + "/sub"
	)
	published := []string{root, sub}
	// good is a changelog of the form, for the cases to break.
	good := strings.Join([]string{
		"# Changelog",
		"",
		"What changed in each module; #### headings as Keep a Changelog has them.",
		"",
		"## Unreleased",
		"",
		"### " + root,
		"",
		"#### Fixed",
		"",
		"- A fix,",
		"  over two lines:",
		"",
		"  ```go",
		"  # not a heading",
		"  ```",
		"",
		"### " + sub,
		"",
		"## v0.2.0 - 2026-07-01",
		"",
		"### " + sub,
		"",
		"#### Added",
		"",
		"- Sub's `New`.",
		"",
		"#### Changed",
		"",
		"- Root's `New` takes options.",
		"",
		"## v0.1.0 - 2026-06-01",
		"",
		"### " + root,
		"",
		"#### Added",
		"",
		"- `New`.",
		"",
	}, "\n")
	tests := []struct {
		name, old, new, want string // good with old replaced by new fails with want
	}{
		{name: "the form"},
		{name: "CRLF", old: "\n", new: "\r\n"},
		{name: "a diary section", old: "### " + root + "\n\n#### Fixed", new: "### Bad input, round four\n\n#### Fixed",
			want: `CHANGELOG.md:7: "### Bad input, round four": not a published module: a section under a release is ` + "`### <module path>` of a module hack/release/modules.txt publishes"},
		{name: "an issue in a heading", old: "### " + sub + "\n\n## v0.2.0", new: "### driver (issue 43)\n\n## v0.2.0",
			want: `CHANGELOG.md:18: "### driver (issue 43)": names a tracker's issue ("issue 43")`},
		{name: "an issue in a bullet", old: "- A fix,", new: "- A fix (#48),", want: `CHANGELOG.md:11: "- A fix (#48),": names a tracker's issue ("#48")`},
		{name: "a module twice", old: "### " + sub + "\n\n## v0.2.0", new: "### " + sub + "\n\n### " + sub + "\n\n## v0.2.0",
			want: "CHANGELOG.md:20: \"### " + sub + "\": a second section of " + sub},
		{name: "no date", old: "## v0.2.0 - 2026-07-01", new: "## v0.2.0", want: "CHANGELOG.md:20: \"## v0.2.0\": a release heading is `## Unreleased` or `## vX.Y.Z - YYYY-MM-DD`"},
		{name: "no such date", old: "2026-07-01", new: "2026-13-01", want: "CHANGELOG.md:20: \"## v0.2.0 - 2026-13-01\": 2026-13-01 is not a date"},
		{name: "oldest first", old: "v0.2.0", new: "v0.0.9", want: "CHANGELOG.md:32: \"## v0.1.0 - 2026-06-01\": v0.1.0 is not below v0.0.9 above it"},
		{name: "a release heading of the diary", old: "## v0.1.0 - 2026-06-01", new: "## Root module", want: "CHANGELOG.md:32: \"## Root module\": a release heading is"},
		{name: "Unreleased below a release", old: "## Unreleased", new: "## v0.3.0 - 2026-08-01\n\n## Unreleased", want: "CHANGELOG.md:7: \"## Unreleased\": `## Unreleased` comes first"},
		{name: "no Unreleased", old: "## Unreleased", new: "## v0.3.0 - 2026-08-01", want: "CHANGELOG.md: no `## Unreleased` heading"},
		{name: "a module missing under Unreleased", old: "### " + sub + "\n\n## v0.2.0", new: "## v0.2.0",
			want: "CHANGELOG.md: no `### " + sub + "` under `## Unreleased`"},
		{name: "another kind", old: "#### Changed", new: "#### Notes", want: "CHANGELOG.md:28: \"#### Notes\": a section under a module is one of `#### Added|Changed|Deprecated|Removed|Fixed|Security`"},
		{name: "a kind twice", old: "#### Changed", new: "#### Added", want: "CHANGELOG.md:28: \"#### Added\": a second `#### Added` under " + sub},
		{name: "a bullet under a module", old: "#### Added\n\n- Sub's", new: "- Sub's", want: "CHANGELOG.md:24: \"- Sub's `New`.\": text under \"## v0.2.0 - 2026-07-01\" outside a `#### Added|"},
		{name: "text under a release", old: "## v0.1.0 - 2026-06-01\n", new: "## v0.1.0 - 2026-06-01\n\nThe first.\n", want: "CHANGELOG.md:34: \"The first.\": text under"},
		{name: "a kind under no module", old: "## v0.1.0 - 2026-06-01\n\n### " + root + "\n", new: "## v0.1.0 - 2026-06-01\n",
			want: "CHANGELOG.md:34: \"#### Added\": a kind of change outside a `### <module path>` section"},
		{name: "a module above Unreleased", old: "## Unreleased", new: "### " + root + "\n\n## Unreleased", want: "CHANGELOG.md:5: \"### " + root + "\": a module's section above `## Unreleased`"},
		{name: "level 5", old: "- `New`.", new: "##### New", want: "CHANGELOG.md:38: \"##### New\": a heading of level 5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			give := good
			if tt.old != "" {
				if !strings.Contains(good, tt.old) {
					t.Fatalf("the form has no %q to replace", tt.old)
				}
				n := 1 // the first, or every line end
				if tt.old == "\n" {
					n = -1
				}
				give = strings.Replace(good, tt.old, tt.new, n)
			}
			problems := checkChangelog(give, published)
			if tt.want == "" && len(problems) > 0 {
				t.Errorf("checkChangelog:\n%s\nwant no problem", strings.Join(problems, "\n"))
			}
			if tt.want != "" && (len(problems) == 0 || !strings.HasPrefix(problems[0], tt.want)) {
				t.Errorf("checkChangelog:\n%s\nwant first %q", strings.Join(problems, "\n"), tt.want)
			}
		})
	}
}
