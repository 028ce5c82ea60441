package main

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/semver"
)

// The form of CHANGELOG.md (Keep a Changelog, https://keepachangelog.com),
// which TestChangelog holds it to: a preamble, then `## Unreleased` and the
// releases, newest first, `## vX.Y.Z - YYYY-MM-DD`; under each, one
// `### <module path>` section per published module that changed (under
// Unreleased, every published module has one, so that a change has its
// place); under those, only the kinds of change below. A user reads what
// changed in the module they use since the release they have: a tracker's
// numbers, and the history of API no release had, are git's.
var (
	versionHeading = regexp.MustCompile(`^## (v\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?) - (\d{4}-\d\d-\d\d)$`)
	trackerRef     = regexp.MustCompile(`(?i)\bissue \d+|#\d+\b`)
	changeKinds    = []string{"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}
)

const unreleased = "## Unreleased"

// checkChangelog returns the problems of changelog's form, each naming its
// line, given the paths of the published modules.
func checkChangelog(changelog string, published []string) []string {
	var problems []string
	problemf := func(n int, line, format string, args ...any) {
		problems = append(problems, fmt.Sprintf("CHANGELOG.md:%d: %q: ", n, line)+fmt.Sprintf(format, args...))
	}
	var (
		release, module, kind string // the headings the line is under
		releaseLine           int
		releases              = map[string]bool{}
		modules               = map[string]bool{} // under the release
		kinds                 = map[string]bool{} // under the module
		underUnreleased       = map[string]bool{}
		newest                string // the newest version so far
		fence                 bool   // inside a ``` block
		textOut               bool   // text outside a kind of change reported since the last heading
	)
	for i, line := range strings.Split(strings.ReplaceAll(changelog, "\r\n", "\n"), "\n") {
		n := i + 1
		if trackerRef.MatchString(line) {
			problemf(n, line, "names a tracker's issue (%q): say what changed for a user; the tracker and git keep the history", trackerRef.FindString(line))
		}
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fence = !fence
		}
		level := len(line) - len(strings.TrimLeft(line, "#"))
		if fence || level == 0 || !strings.HasPrefix(line[level:], " ") {
			// Text: in a release, only under a kind of change; the first
			// line of a run of such text says it for the run.
			if strings.TrimSpace(line) != "" && release != "" && kind == "" && !textOut {
				problemf(n, line, "text under %q outside a `#### %s` section", release, strings.Join(changeKinds, "|"))
				textOut = true
			}
			continue
		}
		textOut = false
		switch title := strings.TrimSpace(line[level+1:]); level {
		case 1:
			if release != "" {
				problemf(n, line, "a title after the first release heading; the file has one, above `%s`", unreleased)
			}
		case 2:
			release, releaseLine, module, kind = line, n, "", ""
			modules, kinds = map[string]bool{}, map[string]bool{}
			m := versionHeading.FindStringSubmatch(line)
			switch {
			case line == unreleased:
				if len(releases) > 0 {
					problemf(n, line, "`%s` comes first, above every release", unreleased)
				}
			case m == nil:
				problemf(n, line, "a release heading is `%s` or `## vX.Y.Z - YYYY-MM-DD`", unreleased)
			case !semver.IsValid(m[1]):
				problemf(n, line, "%s is not a semantic version", m[1])
			default:
				if _, err := time.Parse(time.DateOnly, m[2]); err != nil {
					problemf(n, line, "%s is not a date (YYYY-MM-DD)", m[2])
				}
				if newest != "" && semver.Compare(m[1], newest) >= 0 {
					problemf(n, line, "%s is not below %s above it: releases go newest first", m[1], newest)
				}
				newest = m[1]
			}
			if releases[line] {
				problemf(n, line, "a second `%s`", line)
			}
			releases[line] = true
		case 3:
			module, kind = title, ""
			kinds = map[string]bool{}
			switch {
			case release == "":
				problemf(n, line, "a module's section above `%s`: it goes under a release", unreleased)
			case !slices.Contains(published, title):
				problemf(n, line, "not a published module: a section under a release is `### <module path>` of a module %s publishes", modulesFile)
			case modules[title]:
				problemf(n, line, "a second section of %s under %q (line %d)", title, release, releaseLine)
			}
			modules[title] = true
			if release == unreleased {
				underUnreleased[title] = true
			}
		case 4:
			kind = title
			switch {
			case module == "":
				problemf(n, line, "a kind of change outside a `### <module path>` section")
			case !slices.Contains(changeKinds, title):
				problemf(n, line, "a section under a module is one of `#### %s`", strings.Join(changeKinds, "|"))
			case kinds[title]:
				problemf(n, line, "a second `#### %s` under %s", title, module)
			}
			kinds[title] = true
		default:
			problemf(n, line, "a heading of level %d: the levels are 2 (releases), 3 (modules) and 4 (kinds of change)", level)
		}
	}
	if !releases[unreleased] {
		problems = append(problems, fmt.Sprintf("CHANGELOG.md: no `%s` heading: it holds what the next release will have", unreleased))
	} else {
		for _, p := range published {
			if !underUnreleased[p] {
				problems = append(problems, fmt.Sprintf("CHANGELOG.md: no `### %s` under `%s`: every published module has a section there, for its next changes", p, unreleased))
			}
		}
	}
	return problems
}
