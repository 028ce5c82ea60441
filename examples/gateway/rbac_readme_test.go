package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
)

// TestRBACReadme checks docs/gateway.md's table of the gateway's RBAC against
// the manifests in rbac/.
func TestRBACReadme(t *testing.T) {
	want, err := rbacTable()
	require.NoError(t, err)
	readme, err := os.ReadFile(filepath.Join("..", "..", "docs", "gateway.md"))
	require.NoError(t, err)
	assert.True(t, strings.Contains(string(readme), want), "docs/gateway.md lacks the table of rbac/*.yaml, which is:\n%s", want)
}

// rbacTable renders the rules of the manifests in rbac/ as a Markdown
// table, a row per rule: Roles of one name, which must have the same
// rules in every namespace, make one row each.
func rbacTable() (string, error) {
	var b strings.Builder
	b.WriteString("| manifest | granted by | API group | resources | verbs |\n|---|---|---|---|---|\n")
	row := func(manifest, by string, r rbacv1.PolicyRule) {
		groups := make([]string, len(r.APIGroups))
		for i, g := range r.APIGroups {
			groups[i] = "`" + g + "`"
			if g == "" {
				groups[i] = "core"
			}
		}
		res := "`" + strings.Join(r.Resources, "`, `") + "`"
		if len(r.ResourceNames) > 0 {
			res += " named `" + strings.Join(r.ResourceNames, "`, `") + "`"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", manifest, by, strings.Join(groups, ", "), res, strings.Join(r.Verbs, ", "))
	}
	for _, f := range []struct{ file, manifest string }{
		{"namespaced.yaml", "`namespaced.yaml`"},
		{"cluster.yaml", "`cluster.yaml`"},
	} {
		m, err := readRBAC(filepath.Join("rbac", f.file))
		if err != nil {
			return "", err
		}
		if _, err := m.rules(); err != nil {
			return "", fmt.Errorf("%s: %w", f.file, err)
		}
		for _, r := range m.ClusterRoles {
			for _, rule := range r.Rules {
				row(f.manifest, "ClusterRole `"+r.Name+"`", rule)
			}
		}
		var names []string
		where := map[string][]string{}
		for _, r := range m.Roles {
			if !slices.Contains(names, r.Name) {
				names = append(names, r.Name)
			}
			where[r.Name] = append(where[r.Name], r.Namespace)
		}
		for _, name := range names {
			var rules []rbacv1.PolicyRule
			for _, r := range m.Roles {
				if r.Name != name {
					continue
				}
				if rules == nil {
					rules = r.Rules
				} else if !equality.Semantic.DeepEqual(rules, r.Rules) {
					return "", fmt.Errorf("%s: Role %s has other rules in %s", f.file, name, r.Namespace)
				}
			}
			for _, rule := range rules {
				row(f.manifest, "Role `"+name+"` in "+strings.Join(where[name], ", "), rule)
			}
		}
	}
	return b.String(), nil
}
