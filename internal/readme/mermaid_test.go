package readme

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// TestMermaid parses every ```mermaid block of README.md and docs/*.md
// with [parseFlowchart], so that a diagram GitHub would show as "Unable to
// render" fails here, at its line. README.md must keep at least one: its
// first screen shows the architecture.
func TestMermaid(t *testing.T) {
	total := 0
	for _, doc := range markdownFiles(t, false) {
		blocks := fenced(readDoc(t, doc), "mermaid")
		if doc == "README.md" && len(blocks) == 0 {
			t.Errorf("README.md has no ```mermaid block: the architecture diagrams are gone, or their fence changed")
		}
		for _, b := range blocks {
			total++
			if err := parseFlowchart(strings.Join(b.body, "\n")); err != nil {
				line := b.line
				if pe := (*parseError)(nil); errors.As(err, &pe) {
					line += pe.line
				}
				t.Errorf("%s:%d: %v", doc, line, err)
			}
		}
	}
	t.Logf("%d Mermaid diagrams parsed", total)
}

// parseError is a problem on a line of a diagram, 1-based.
type parseError struct {
	line int
	msg  string
}

func (e *parseError) Error() string { return fmt.Sprintf("mermaid line %d: %s", e.line, e.msg) }

var (
	directions = []string{"TB", "TD", "BT", "RL", "LR"}
	// keywords cannot be node ids: Mermaid reads them as statements.
	keywords = []string{"end", "subgraph", "graph", "flowchart", "direction", "class", "classDef", "style", "linkStyle", "click", "call", "href"}
	// arrows are the links without a label inside.
	arrows = []string{"-->", "---", "-.->", "==>"}
	// labelled maps the opening of a link with its label inside to the
	// closings it may have.
	labelled = map[string][]string{"--": {"-->", "---"}, "-.": {".->"}, "==": {"==>"}}
)

// parseFlowchart parses one diagram; the error is a *parseError. It knows
// the part of Mermaid's flowchart syntax these docs use, and refuses the
// rest, so that what it accepts GitHub renders:
//
//   - a header, flowchart or graph, with an optional direction (TB, TD,
//     BT, RL, LR); %% comments and blank lines anywhere;
//   - statements: a node, or nodes joined by links (a --> b --> c), each
//     link with a space on either side;
//   - a node: an id (letters, digits, _), then optionally, with no space
//     between, a shape, [text], (text), {text} or [(text)], and a
//     :::class. Text is "quoted" (anything but a quote) or bare (no
//     brackets, quotes, pipes or semicolons);
//   - links: -->, ---, -.-> and ==>, each optionally followed by |label|,
//     or with the label inside: -- label -->, -- label ---, -. label .->,
//     == label ==>;
//   - subgraph id, subgraph id[title] or subgraph id [title], closed by
//     end; direction inside a subgraph;
//   - classDef, class and style lines.
//
// A trailing semicolon is allowed. Anything else (other shapes and arrows,
// &, click, linkStyle, %%{ }%% directives) is an error naming the line:
// extend the parser, and its test, when a diagram needs more.
func parseFlowchart(src string) error {
	var (
		header    bool
		subgraphs []int // lines of the open subgraphs
	)
	for i, line := range strings.Split(src, "\n") {
		n := i + 1
		fail := func(format string, args ...any) error {
			return &parseError{line: n, msg: fmt.Sprintf(format, args...)}
		}
		s := strings.TrimSpace(line)
		switch {
		case s == "":
			continue
		case strings.HasPrefix(s, "%%{"):
			return fail("directives (%%%%{ ... }%%%%) are not in the subset")
		case strings.HasPrefix(s, "%%"):
			continue
		}
		s = strings.TrimSpace(strings.TrimSuffix(s, ";"))
		f := strings.Fields(s)
		if len(f) == 0 {
			continue
		}
		if !header {
			if (f[0] != "flowchart" && f[0] != "graph") || len(f) > 2 || (len(f) == 2 && !slices.Contains(directions, f[1])) {
				return fail("want the header first: flowchart or graph, then optionally one of %s; got %q", strings.Join(directions, ", "), s)
			}
			header = true
			continue
		}
		switch f[0] {
		case "subgraph":
			if err := parseSubgraph(strings.TrimSpace(strings.TrimPrefix(s, "subgraph"))); err != "" {
				return fail("%s", err)
			}
			subgraphs = append(subgraphs, n)
		case "end":
			if len(f) != 1 {
				return fail("end takes nothing after it")
			}
			if len(subgraphs) == 0 {
				return fail("end without a subgraph")
			}
			subgraphs = subgraphs[:len(subgraphs)-1]
		case "direction":
			if len(subgraphs) == 0 {
				return fail("direction outside a subgraph: set it in the header")
			}
			if len(f) != 2 || !slices.Contains(directions, f[1]) {
				return fail("direction wants one of %s", strings.Join(directions, ", "))
			}
		case "classDef":
			if len(f) < 3 || !ids(f[1]) {
				return fail("classDef wants a class name and its styles")
			}
		case "class":
			if len(f) != 3 || !ids(f[1]) || !isID(f[2]) {
				return fail("class wants node ids, comma-separated, and a class name")
			}
		case "style":
			if len(f) < 3 || !isID(f[1]) {
				return fail("style wants a node id and its styles")
			}
		case "linkStyle", "click", "accTitle", "accDescr", "accTitle:", "accDescr:":
			return fail("%s is not in the subset", f[0])
		default:
			if err := parseChain(s); err != "" {
				return fail("%s", err)
			}
		}
	}
	switch {
	case !header:
		return &parseError{line: 1, msg: "no header: the diagram is empty"}
	case len(subgraphs) > 0:
		return &parseError{line: subgraphs[len(subgraphs)-1], msg: "subgraph without end"}
	}
	return nil
}

// parseSubgraph parses what follows "subgraph": an id, then optionally
// a [title], with or without a space before it.
func parseSubgraph(s string) string {
	id, rest := cutID(s)
	if id == "" {
		return "subgraph wants an id, optionally followed by a [title]"
	}
	if bad := keyword(id); bad != "" {
		return bad
	}
	rest = strings.TrimLeft(rest, " \t")
	if rest == "" {
		return ""
	}
	if rest[0] != '[' {
		return fmt.Sprintf("subgraph %s: want a [title] or nothing after the id, got %q", id, rest)
	}
	text, rest, err := cutText(rest[1:], "]", id)
	if err != "" {
		return err
	}
	if text == "" {
		return fmt.Sprintf("subgraph %s: empty title", id)
	}
	if rest != "" {
		return fmt.Sprintf("subgraph %s: %q after the title", id, rest)
	}
	return ""
}

// parseChain parses a node, or nodes joined by links.
func parseChain(s string) string {
	rest, err := parseNode(s)
	for err == "" && rest != "" {
		trimmed := strings.TrimLeft(rest, " \t")
		if trimmed == rest {
			return fmt.Sprintf("want a space before %q", rest)
		}
		if trimmed == "" {
			return ""
		}
		rest, err = parseLink(trimmed)
		if err != "" {
			return err
		}
		trimmed = strings.TrimLeft(rest, " \t")
		if trimmed == "" {
			return "a link wants a node after it"
		}
		if trimmed == rest {
			return fmt.Sprintf("want a space after a link, before %q", rest)
		}
		rest, err = parseNode(trimmed)
	}
	return err
}

// parseNode parses a node at the start of s and returns what follows it.
func parseNode(s string) (rest string, err string) {
	id, rest := cutID(s)
	if id == "" {
		if s != "" && s[0] == '&' {
			return "", "& is not in the subset: write one link per pair of nodes"
		}
		return "", fmt.Sprintf("want a node id (letters, digits, _) at %q", s)
	}
	if bad := keyword(id); bad != "" {
		return "", bad
	}
	if rest == "" {
		return "", ""
	}
	var closer string
	switch {
	case strings.HasPrefix(rest, "[("):
		rest, closer = rest[2:], ")]"
	case strings.HasPrefix(rest, "(("), strings.HasPrefix(rest, "(["), strings.HasPrefix(rest, "[["),
		strings.HasPrefix(rest, "[/"), strings.HasPrefix(rest, "[\\"), strings.HasPrefix(rest, "{{"),
		strings.HasPrefix(rest, ">"):
		return "", fmt.Sprintf("node %s: the shape %q... is not in the subset: use [text], (text), {text} or [(text)]", id, rest[:min(2, len(rest))])
	case rest[0] == '[':
		rest, closer = rest[1:], "]"
	case rest[0] == '(':
		rest, closer = rest[1:], ")"
	case rest[0] == '{':
		rest, closer = rest[1:], "}"
	}
	if closer != "" {
		var text string
		text, rest, err = cutText(rest, closer, id)
		if err != "" {
			return "", err
		}
		if text == "" {
			return "", fmt.Sprintf("node %s: empty text", id)
		}
	}
	if after, ok := strings.CutPrefix(rest, ":::"); ok {
		var class string
		class, rest = cutID(after)
		if class == "" {
			return "", fmt.Sprintf("node %s: ::: wants a class name", id)
		}
	}
	if rest != "" && rest[0] != ' ' && rest[0] != '\t' {
		return "", fmt.Sprintf("node %s: unexpected %q after it", id, rest)
	}
	return rest, ""
}

// parseLink parses a link at the start of s, with its label if any, and
// returns what follows it.
func parseLink(s string) (rest string, err string) {
	// The link runs to the first character that cannot be part of one.
	// Mermaid's o and x ends (--o, --x) are read as part of it, and so
	// refused, as are <, ~ and longer links.
	end := strings.IndexFunc(s, func(r rune) bool { return !strings.ContainsRune("-.=<>ox~", r) })
	if end < 0 {
		end = len(s)
	}
	arrow := s[:end]
	switch {
	case arrow == "":
		if s[0] == '&' {
			return "", "& is not in the subset: write one link per pair of nodes"
		}
		return "", fmt.Sprintf("want a link (%s) at %q", strings.Join(arrows, ", "), s)
	case slices.Contains(arrows, arrow):
		rest = s[end:]
		if strings.HasPrefix(rest, "|") {
			var label string
			label, rest, err = cutText(rest[1:], "|", "link "+arrow)
			if err != "" {
				return "", err
			}
			if label == "" {
				return "", fmt.Sprintf("link %s: empty |label|", arrow)
			}
		}
		return rest, ""
	case labelled[arrow] != nil:
		if end == len(s) || (s[end] != ' ' && s[end] != '\t') {
			return "", fmt.Sprintf("link %s: want a space, then its label", arrow)
		}
		label := strings.TrimLeft(s[end:], " \t")
		var text string
		if strings.HasPrefix(label, `"`) {
			q := strings.IndexByte(label[1:], '"')
			if q < 0 {
				return "", fmt.Sprintf("link %s: unclosed quote in its label", arrow)
			}
			text, rest = label[1:1+q], strings.TrimLeft(label[2+q:], " \t")
			for _, c := range labelled[arrow] {
				if after, ok := strings.CutPrefix(rest, c); ok {
					return after, ""
				}
			}
			return "", fmt.Sprintf("link %s %q: want one of %s after the label", arrow, text, strings.Join(labelled[arrow], ", "))
		}
		at, closing := -1, ""
		for _, c := range labelled[arrow] {
			if i := strings.Index(label, " "+c); i >= 0 && (at < 0 || i < at) {
				at, closing = i, c
			}
		}
		if at < 0 {
			return "", fmt.Sprintf("link %s: no %s closes its label", arrow, strings.Join(labelled[arrow], " or "))
		}
		text = strings.TrimSpace(label[:at])
		if text == "" {
			return "", fmt.Sprintf("link %s: empty label", arrow)
		}
		if i := strings.IndexAny(text, bare); i >= 0 {
			return "", fmt.Sprintf("link %s: %q in a bare label: quote the label", arrow, text[i])
		}
		return label[at+1+len(closing):], ""
	}
	return "", fmt.Sprintf("unknown link %q: the subset has %s, with |label| or a label inside", arrow, strings.Join(arrows, ", "))
}

// bare are the characters bare text may not hold.
const bare = `[](){}"|;`

// cutText reads a node's text or a label up to closer, quoted or bare,
// and returns it and what follows closer.
func cutText(s, closer, what string) (text, rest, err string) {
	if strings.HasPrefix(s, `"`) {
		q := strings.IndexByte(s[1:], '"')
		if q < 0 {
			return "", "", fmt.Sprintf("%s: unclosed quote", what)
		}
		text, s = s[1:1+q], s[2+q:]
		if !strings.HasPrefix(s, closer) {
			return "", "", fmt.Sprintf("%s: want %s right after the quoted text, got %q", what, closer, s)
		}
		return text, s[len(closer):], ""
	}
	i := strings.Index(s, closer)
	if i < 0 {
		return "", "", fmt.Sprintf("%s: unclosed: no %s ends its text", what, closer)
	}
	text = s[:i]
	if j := strings.IndexAny(text, bare); j >= 0 {
		return "", "", fmt.Sprintf("%s: %q in bare text: quote the text", what, text[j])
	}
	return text, s[i+len(closer):], ""
}

// cutID returns the id at the start of s and what follows it.
func cutID(s string) (id, rest string) {
	i := strings.IndexFunc(s, func(r rune) bool { return !isIDRune(r) })
	if i < 0 {
		i = len(s)
	}
	return s[:i], s[i:]
}

func isIDRune(r rune) bool {
	return r == '_' || ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z') || ('0' <= r && r <= '9')
}

func isID(s string) bool {
	id, rest := cutID(s)
	return id != "" && rest == ""
}

// ids reports whether s is ids separated by commas.
func ids(s string) bool {
	for _, id := range strings.Split(s, ",") {
		if !isID(id) {
			return false
		}
	}
	return true
}

func keyword(id string) string {
	if slices.Contains(keywords, id) {
		return fmt.Sprintf("%q is a keyword, not a node id", id)
	}
	return ""
}

func TestParseFlowchart(t *testing.T) {
	// wantErr holds a piece of the error and wantLine its line. Checked
	// once against Mermaid 11.17's own parser (mermaid.parse): it accepts
	// every accepted sample and the rejected ones marked "subset", which
	// the parser does not know, and refuses the others.
	tests := []struct {
		name     string
		give     string
		wantErr  string
		wantLine int
	}{
		{name: "header and one link", give: "flowchart LR\n  a --> b"},
		{name: "graph without direction", give: "graph\n  a --> b"},
		{name: "comments, blanks and semicolons", give: "%% leading comment\n\nflowchart TB;\n  %% a comment\n  a --> b;\n"},
		{name: "shapes", give: "flowchart TB\n  a[square] --> b(round)\n  b --> c{decision}\n  c --> d[(database)]"},
		{name: "quoted text with brackets and html", give: "flowchart TB\n  a[\"timeout.New(d): one deadline<br/>per attempt [x]\"] --> b"},
		{name: "every link", give: "flowchart LR\n  a --> b\n  a --- c\n  a -.-> d\n  a ==> e"},
		{name: "labels", give: "flowchart LR\n  a -->|yes| b\n  a -->|\"a (quoted) label\"| c\n  a -- plain label --> d\n  a -- \"quoted (label)\" --> e\n  a -- joined --- f\n  a -. dotted .-> g\n  a == thick ==> h"},
		{name: "chain", give: "flowchart LR\n  a --> b --> c[text] -.-> d"},
		{name: "subgraphs", give: "flowchart LR\n  subgraph one\n    a\n  end\n  subgraph two[\"Two (2)\"]\n    direction TB\n    subgraph three [three]\n      b\n    end\n  end\n  one --> two"},
		{name: "styles", give: "flowchart LR\n  a:::warn --> b\n  classDef warn fill:#f96,stroke:#333\n  class a,b warn\n  style b fill:#bbf"},

		{name: "missing header", give: "a --> b", wantErr: "want the header first", wantLine: 1},
		{name: "empty", give: "%% only a comment\n", wantErr: "no header", wantLine: 1},
		{name: "wrong direction", give: "flowchart XY\n  a --> b", wantErr: "want the header first", wantLine: 1},
		{name: "sequence diagram (subset)", give: "sequenceDiagram\n  a->>b: hi", wantErr: "want the header first", wantLine: 1},
		{name: "unclosed subgraph", give: "flowchart LR\n  subgraph one\n    a\n  subgraph two\n    b\n  end", wantErr: "subgraph without end", wantLine: 2},
		{name: "end without subgraph", give: "flowchart LR\n  a --> b\n  end", wantErr: "end without a subgraph", wantLine: 3},
		{name: "unknown arrow", give: "flowchart LR\n  a -> b", wantErr: `unknown link "->"`, wantLine: 2},
		{name: "wavy arrow", give: "flowchart LR\n  a ~~> b", wantErr: "unknown link", wantLine: 2},
		{name: "long arrow (subset)", give: "flowchart LR\n  a ---> b", wantErr: "unknown link", wantLine: 2},
		{name: "no space around a link (subset)", give: "flowchart LR\n  a-->b", wantErr: "unexpected", wantLine: 2},
		{name: "unclosed bracket", give: "flowchart LR\n  a[open --> b", wantErr: "unclosed", wantLine: 2},
		{name: "unclosed quote", give: "flowchart LR\n  a[\"open] --> b", wantErr: "unclosed quote", wantLine: 2},
		{name: "bracket in bare text", give: "flowchart LR\n  a[timeout.New(d)] --> b", wantErr: "quote the text", wantLine: 2},
		{name: "bracket in a bare label", give: "flowchart LR\n  a -->|a (x)| b", wantErr: "quote the text", wantLine: 2},
		{name: "unclosed label", give: "flowchart LR\n  a -- label b", wantErr: "closes its label", wantLine: 2},
		{name: "link without a node", give: "flowchart LR\n  a -->", wantErr: "wants a node", wantLine: 2},
		{name: "keyword as a node", give: "flowchart LR\n  a --> end", wantErr: "keyword", wantLine: 2},
		{name: "circle shape (subset)", give: "flowchart LR\n  a((circle)) --> b", wantErr: "not in the subset", wantLine: 2},
		{name: "ampersand (subset)", give: "flowchart LR\n  a & b --> c", wantErr: "& is not in the subset", wantLine: 2},
		{name: "click (subset)", give: "flowchart LR\n  a --> b\n  click a \"https://example.com\"", wantErr: "not in the subset", wantLine: 3},
		{name: "directive (subset)", give: "%%{init: {\"theme\": \"dark\"}}%%\nflowchart LR\n  a --> b", wantErr: "directives", wantLine: 1},
		{name: "direction outside a subgraph (subset)", give: "flowchart LR\n  direction TB", wantErr: "outside a subgraph", wantLine: 2},
		{name: "class without a name", give: "flowchart LR\n  a --> b\n  class a", wantErr: "class wants", wantLine: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := parseFlowchart(tt.give)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("parseFlowchart(%q) = %v, want nil", tt.give, err)
				}
				return
			}
			var pe *parseError
			if !errors.As(err, &pe) {
				t.Fatalf("parseFlowchart(%q) = %v, want a *parseError", tt.give, err)
			}
			if !strings.Contains(pe.msg, tt.wantErr) || pe.line != tt.wantLine {
				t.Errorf("parseFlowchart(%q) = %v, want line %d and %q", tt.give, err, tt.wantLine, tt.wantErr)
			}
		})
	}
}
