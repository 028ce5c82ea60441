package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
)

// rbacManifest is the RBAC objects of a manifest.
type rbacManifest struct {
	Roles               []*rbacv1.Role
	RoleBindings        []*rbacv1.RoleBinding
	ClusterRoles        []*rbacv1.ClusterRole
	ClusterRoleBindings []*rbacv1.ClusterRoleBinding
}

// add returns m with the objects of o.
func (m rbacManifest) add(o rbacManifest) rbacManifest {
	return rbacManifest{
		Roles:               append(m.Roles, o.Roles...),
		RoleBindings:        append(m.RoleBindings, o.RoleBindings...),
		ClusterRoles:        append(m.ClusterRoles, o.ClusterRoles...),
		ClusterRoleBindings: append(m.ClusterRoleBindings, o.ClusterRoleBindings...),
	}
}

// readRBAC reads the RBAC objects of a multi-document YAML file; any other
// kind is an error.
func readRBAC(path string) (rbacManifest, error) {
	var m rbacManifest
	data, err := os.ReadFile(path)
	if err != nil {
		return m, err
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return m, nil
		}
		if err != nil {
			return m, fmt.Errorf("%s: %w", path, err)
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			return m, fmt.Errorf("%s: %w", path, err)
		}
		switch o := obj.(type) {
		case *rbacv1.Role:
			m.Roles = append(m.Roles, o)
		case *rbacv1.RoleBinding:
			m.RoleBindings = append(m.RoleBindings, o)
		case *rbacv1.ClusterRole:
			m.ClusterRoles = append(m.ClusterRoles, o)
		case *rbacv1.ClusterRoleBinding:
			m.ClusterRoleBindings = append(m.ClusterRoleBindings, o)
		default:
			return m, fmt.Errorf("%s: unexpected %T", path, obj)
		}
	}
}

// bind returns m for user and namespaces, the first of which holds the
// lease: a Role or RoleBinding that m gives each of [rbacNamespaces] is
// each served namespace's, and is given every one of namespaces; any other
// goes to the namespace at the index of its own in [rbacNamespaces]. Each
// binding's one subject, [rbacSubject], becomes user.
func (m rbacManifest) bind(user string, namespaces []string) (rbacManifest, error) {
	var errs []error
	ns := func(what, from string) string {
		i := slices.Index(rbacNamespaces, from)
		if i < 0 {
			errs = append(errs, fmt.Errorf("%s is in namespace %q, not one of %v", what, from, rbacNamespaces))
			return from
		}
		return namespaces[i]
	}
	subjects := func(what string, s []rbacv1.Subject) []rbacv1.Subject {
		if len(s) != 1 || s[0] != rbacSubject {
			errs = append(errs, fmt.Errorf("%s binds %v, want only %v", what, s, rbacSubject))
		}
		return []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}
	}
	// where returns the namespaces an object of m goes to: none for all
	// but one copy of an object every namespace has.
	where := func(what, name, from string, count map[string]int) []string {
		switch {
		case count[name] < len(rbacNamespaces):
			return []string{ns(what, from)}
		case from == rbacNamespaces[0]:
			return namespaces
		}
		return nil
	}
	roles, bindings := map[string]int{}, map[string]int{}
	for _, r := range m.Roles {
		roles[r.Name]++
	}
	for _, b := range m.RoleBindings {
		bindings[b.Name]++
	}
	var out rbacManifest
	for _, r := range m.Roles {
		for _, n := range where("Role "+r.Name, r.Name, r.Namespace, roles) {
			r := r.DeepCopy()
			r.Namespace = n
			out.Roles = append(out.Roles, r)
		}
	}
	for _, b := range m.RoleBindings {
		for _, n := range where("RoleBinding "+b.Name, b.Name, b.Namespace, bindings) {
			b := b.DeepCopy()
			b.Namespace = n
			b.Subjects = subjects("RoleBinding "+b.Name, b.Subjects)
			out.RoleBindings = append(out.RoleBindings, b)
		}
	}
	// Cluster-scoped objects are named for user too: the manifests share
	// an API server, and both have kubewire-gateway-auth.
	for _, r := range m.ClusterRoles {
		r = r.DeepCopy()
		r.Name += "-" + user
		out.ClusterRoles = append(out.ClusterRoles, r)
	}
	for _, b := range m.ClusterRoleBindings {
		b = b.DeepCopy()
		b.Name += "-" + user
		b.RoleRef.Name += "-" + user
		b.Subjects = subjects("ClusterRoleBinding "+b.Name, b.Subjects)
		out.ClusterRoleBindings = append(out.ClusterRoleBindings, b)
	}
	return out, errors.Join(errs...)
}

// boundRule is a rule of a role as a binding gives it.
type boundRule struct {
	binding   string // the authorizer's name for it
	user      string // its subject
	namespace string // where it applies; "" for every namespace and the cluster
	rule      rbacv1.PolicyRule
}

// rules returns the rules each binding of m gives, with the roles it
// refers to resolved within m.
func (m rbacManifest) rules() ([]boundRule, error) {
	var out []boundRule
	var errs []error
	clusterRole := func(name string) []rbacv1.PolicyRule {
		for _, r := range m.ClusterRoles {
			if r.Name == name {
				return r.Rules
			}
		}
		errs = append(errs, fmt.Errorf("no ClusterRole %s", name))
		return nil
	}
	for _, b := range m.RoleBindings {
		var rules []rbacv1.PolicyRule
		if b.RoleRef.Kind == "ClusterRole" {
			rules = clusterRole(b.RoleRef.Name)
		} else if i := slices.IndexFunc(m.Roles, func(r *rbacv1.Role) bool { return r.Namespace == b.Namespace && r.Name == b.RoleRef.Name }); i >= 0 {
			rules = m.Roles[i].Rules
		} else {
			errs = append(errs, fmt.Errorf("RoleBinding %s/%s: no Role %s", b.Namespace, b.Name, b.RoleRef.Name))
		}
		for _, r := range rules {
			out = append(out, boundRule{fmt.Sprintf("RoleBinding %q", b.Name+"/"+b.Namespace), subject(b.Subjects), b.Namespace, r})
		}
	}
	for _, b := range m.ClusterRoleBindings {
		for _, r := range clusterRole(b.RoleRef.Name) {
			out = append(out, boundRule{fmt.Sprintf("ClusterRoleBinding %q", b.Name), subject(b.Subjects), "", r})
		}
	}
	for _, r := range m.Roles {
		if !slices.ContainsFunc(m.RoleBindings, func(b *rbacv1.RoleBinding) bool {
			return b.Namespace == r.Namespace && b.RoleRef.Kind == "Role" && b.RoleRef.Name == r.Name
		}) {
			errs = append(errs, fmt.Errorf("Role %s/%s: no RoleBinding", r.Namespace, r.Name))
		}
	}
	for _, r := range m.ClusterRoles {
		if !slices.ContainsFunc(m.ClusterRoleBindings, func(b *rbacv1.ClusterRoleBinding) bool { return b.RoleRef.Name == r.Name }) &&
			!slices.ContainsFunc(m.RoleBindings, func(b *rbacv1.RoleBinding) bool { return b.RoleRef.Kind == "ClusterRole" && b.RoleRef.Name == r.Name }) {
			errs = append(errs, fmt.Errorf("ClusterRole %s: no binding", r.Name))
		}
	}
	return out, errors.Join(errs...)
}

// subject is the name of a binding's first subject.
func subject(s []rbacv1.Subject) string {
	if len(s) == 0 {
		return ""
	}
	return s[0].Name
}

// grants returns every verb on every resource that a binding of m gives.
func (m rbacManifest) grants() map[grant]bool {
	rules, _ := m.rules() // apply has checked them
	out := map[grant]bool{}
	for _, br := range rules {
		for _, g := range br.rule.APIGroups {
			for _, res := range br.rule.Resources {
				for _, v := range br.rule.Verbs {
					out[grant{Binding: br.binding, Group: g, Resource: res, Verb: v}] = true
				}
			}
		}
	}
	return out
}

// apply creates m's objects and waits until the authorizer allows each of
// its grants (its RBAC cache follows the objects through a watch).
func (m rbacManifest) apply(t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	rules, err := m.rules()
	require.NoError(t, err)
	rbac := cs.RbacV1()
	for _, r := range m.ClusterRoles {
		_, err := rbac.ClusterRoles().Create(ctx, r, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	for _, r := range m.Roles {
		_, err := rbac.Roles(r.Namespace).Create(ctx, r, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	for _, b := range m.ClusterRoleBindings {
		_, err := rbac.ClusterRoleBindings().Create(ctx, b, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	for _, b := range m.RoleBindings {
		_, err := rbac.RoleBindings(b.Namespace).Create(ctx, b, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	for _, br := range rules {
		for _, attrs := range br.attributes() {
			require.Eventually(t, func() bool {
				review, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
					User: br.user, ResourceAttributes: &attrs,
				}}, metav1.CreateOptions{})
				return err == nil && review.Status.Allowed
			}, 10*time.Second, 10*time.Millisecond, "%s never allowed %+v", br.binding, attrs)
		}
	}
}

// attributes returns a request for each verb on each resource of br.
func (br boundRule) attributes() []authorizationv1.ResourceAttributes {
	var name string
	if len(br.rule.ResourceNames) > 0 {
		name = br.rule.ResourceNames[0]
	}
	var out []authorizationv1.ResourceAttributes
	for _, g := range br.rule.APIGroups {
		for _, res := range br.rule.Resources {
			for _, v := range br.rule.Verbs {
				out = append(out, authorizationv1.ResourceAttributes{Namespace: br.namespace, Group: g, Resource: res, Verb: v, Name: name})
			}
		}
	}
	return out
}
