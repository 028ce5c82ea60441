package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/client-go/kubernetes"
)

// rbacMarker is the ConfigMap whose creation ends the audit log a test
// reads: the gateways have stopped, and every request they made was
// answered, before it is created.
const rbacMarker = "rbac-audit-marker"

// readAuditUntilMarker creates the marker in ns and reads the audit log
// until it holds the marker's creation; it returns user's events, one per
// request: the last stage logged of it.
func readAuditUntilMarker(t *testing.T, cs kubernetes.Interface, path, ns, user string) []auditv1.Event {
	t.Helper()
	_, err := cs.CoreV1().ConfigMaps(ns).Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: rbacMarker}}, metav1.CreateOptions{})
	require.NoError(t, err)
	var out []auditv1.Event
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		events, marked, err := readAudit(path, ns, user)
		require.NoError(c, err)
		out = events
		assert.True(c, marked, "the marker's creation is logged")
	}, 10*time.Second, 20*time.Millisecond)
	return out
}

func readAudit(path, markerNS, user string) (_ []auditv1.Event, marked bool, _ error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	byID := map[string]int{}
	var out []auditv1.Event
	dec := json.NewDecoder(f)
	for {
		var ev auditv1.Event
		err := dec.Decode(&ev)
		if err == io.EOF {
			return out, marked, nil
		}
		if err != nil {
			// A line being written: read again.
			return out, false, nil
		}
		if ref := ev.ObjectRef; ref != nil && ev.Verb == "create" && ref.Resource == "configmaps" && ref.Namespace == markerNS &&
			ref.Name == rbacMarker && ev.Stage == auditv1.StageResponseComplete {
			marked = true
		}
		if ev.User.Username != user {
			continue
		}
		// The stages of one request share its Audit-ID, and so do the
		// requests the gateway makes for one call of its own: the ID, the
		// time received and the request tell one request's stages apart.
		id := fmt.Sprintf("%s %s %s %s", ev.AuditID, ev.RequestReceivedTimestamp.Format(time.RFC3339Nano), ev.Verb, ev.RequestURI)
		if i, ok := byID[id]; ok {
			out[i] = ev
			continue
		}
		byID[id] = len(out)
		out = append(out, ev)
	}
}

// grant is one verb a binding gives on a resource: what a request is
// credited to.
type grant struct {
	Binding         string // as the RBAC authorizer names it: RoleBinding "name/namespace", ClusterRoleBinding "name"
	Group, Resource string
	Verb            string
}

func (g grant) String() string {
	if g.Group == "" {
		return fmt.Sprintf("%s: %s %s", g.Binding, g.Verb, g.Resource)
	}
	return fmt.Sprintf("%s: %s %s/%s", g.Binding, g.Verb, g.Group, g.Resource)
}

// allowedBy is the RBAC authorizer's reason for allowing a request
// (kubernetes plugin/pkg/auth/authorizer/rbac: "RBAC: allowed by " and the
// binding's description).
var allowedBy = regexp.MustCompile(`^RBAC: allowed by ((?:RoleBinding|ClusterRoleBinding) "[^"]+") of `)

// checkRBAC fails for each request of user the API server refused and for
// each grant of m no request of user was allowed by.
func checkRBAC(t *testing.T, m rbacManifest, events []auditv1.Event, user string) {
	t.Helper()
	grants := m.grants()
	used := map[grant]int{}
	refused, elsewhere := map[string]int{}, map[string]int{}
	nonResource, reviews := 0, 0
	for _, ev := range events {
		ref := ev.ObjectRef
		what := ev.Verb + " " + ev.RequestURI
		if ref != nil {
			what = fmt.Sprintf("%s %s/%s namespace %q name %q", ev.Verb, ref.APIGroup, ref.Resource, ref.Namespace, ref.Name)
		}
		if reason := ev.Annotations["authorization.k8s.io/reason"]; reason != "" {
			what += " (" + reason + ")"
		}
		if ev.ResponseStatus != nil && ev.ResponseStatus.Code == http.StatusForbidden || ev.Annotations["authorization.k8s.io/decision"] == "forbid" {
			refused[what]++
			continue
		}
		if ref == nil {
			nonResource++
			continue
		}
		if ref.APIGroup == "authorization.k8s.io" && ref.Resource == "selfsubjectaccessreviews" {
			// From 10 namespaces on, the reconciler asks whether it may
			// watch the whole cluster. Every authenticated user may ask
			// (the default ClusterRole system:basic-user), as every
			// one may read discovery.
			reviews++
			continue
		}
		resource := ref.Resource
		if ref.Subresource != "" {
			resource += "/" + ref.Subresource
		}
		b := allowedBy.FindStringSubmatch(ev.Annotations["authorization.k8s.io/reason"])
		g := grant{Group: ref.APIGroup, Resource: resource, Verb: ev.Verb}
		if b != nil {
			g.Binding = b[1]
		}
		if !grants[g] {
			elsewhere[what]++
			continue
		}
		used[g]++
	}
	var lines []string
	for g, n := range used {
		lines = append(lines, fmt.Sprintf("%4d  %s", n, g))
	}
	sort.Strings(lines)
	t.Logf("requests of %s: %d to resources, %d SelfSubjectAccessReviews, %d to discovery and other paths; by grant:\n%s",
		user, len(events)-nonResource-reviews, reviews, nonResource, strings.Join(lines, "\n"))
	assert.Empty(t, refused, "requests refused: a rule is missing from the manifest")
	var unused []string
	for g := range grants {
		if used[g] == 0 {
			unused = append(unused, g.String())
		}
	}
	sort.Strings(unused)
	assert.Empty(t, unused, "grants no request used: remove them from the manifest, or drive what needs them")
	// The discovery requests and the like are allowed by the roles every
	// authenticated user has; a resource request should not be.
	assert.Empty(t, elsewhere, "resource requests allowed by a binding the manifest does not have")
}
