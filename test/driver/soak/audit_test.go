package soak

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/kubewire/kubewire/retry"
	"github.com/kubewire/kubewire/transport/transporttest"
)

// TestMain checks for leaked goroutines, then removes the gateway the
// soak built.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		Cleanup()
		os.Exit(code)
	}))
}

// A delete as kube-apiserver v1.37 logs it under AuditPolicy, a watch at
// the Metadata level, and the ResponseStarted stage the policy omits (a
// policy that did not would log it too).
const auditLog = `{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"RequestResponse","auditID":"op-000014/idempotent","stage":"ResponseComplete","requestURI":"/apis/agents.x-k8s.io/v1beta1/namespaces/soak-tvzrw/sandboxes/c01-s2","verb":"delete","user":{"username":"kubewire-gateway","groups":["system:masters","system:authenticated"]},"sourceIPs":["127.0.0.1"],"userAgent":"gateway.test/v0.0.0 (linux/amd64) kubernetes/$Format","objectRef":{"resource":"sandboxes","namespace":"soak-tvzrw","name":"c01-s2","apiGroup":"agents.x-k8s.io","apiVersion":"v1beta1"},"responseStatus":{"metadata":{},"status":"Success","details":{"name":"c01-s2","group":"agents.x-k8s.io","kind":"sandboxes","uid":"8d1bacbd-ea1e-4097-a6ee-56ff1989cf93"},"code":200},"requestObject":{"kind":"DeleteOptions","apiVersion":"meta.k8s.io/__internal","preconditions":{"uid":"8d1bacbd-ea1e-4097-a6ee-56ff1989cf93"}},"responseObject":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success","details":{"name":"c01-s2","group":"agents.x-k8s.io","kind":"sandboxes","uid":"8d1bacbd-ea1e-4097-a6ee-56ff1989cf93"}},"requestReceivedTimestamp":"2026-11-30T00:48:31.337433Z","stageTimestamp":"2026-11-30T00:48:31.343711Z"}
{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"5b0e4f6a-6f0f-4c36-9b83-0f2b8a1c2d3e","stage":"ResponseStarted","requestURI":"/apis/agents.x-k8s.io/v1beta1/namespaces/soak-tvzrw/sandboxes?watch=true","verb":"watch","user":{"username":"kubewire-gateway"},"objectRef":{"resource":"sandboxes","namespace":"soak-tvzrw","apiGroup":"agents.x-k8s.io","apiVersion":"v1beta1"},"responseStatus":{"metadata":{},"code":200},"requestReceivedTimestamp":"2026-11-30T00:48:31.100000Z","stageTimestamp":"2026-11-30T00:48:31.200000Z"}
{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"5b0e4f6a-6f0f-4c36-9b83-0f2b8a1c2d3e","stage":"ResponseComplete","requestURI":"/apis/agents.x-k8s.io/v1beta1/namespaces/soak-tvzrw/sandboxes?watch=true","verb":"watch","user":{"username":"kubewire-gateway"},"objectRef":{"resource":"sandboxes","namespace":"soak-tvzrw","apiGroup":"agents.x-k8s.io","apiVersion":"v1beta1"},"responseStatus":{"metadata":{},"code":200},"requestReceivedTimestamp":"2026-11-30T00:48:31.100000Z","stageTimestamp":"2026-11-30T00:48:39.200000Z"}
`

func TestReadAudit(t *testing.T) {
	evs, err := ReadAudit(strings.NewReader(auditLog))
	require.NoError(t, err)
	require.Len(t, evs, 2, "ResponseStarted is not an execution")
	del := evs[0]
	assert.Equal(t, "op-000014/idempotent", del.AuditID)
	assert.Equal(t, "delete", del.Verb)
	assert.Equal(t, "kubewire-gateway", del.User)
	assert.Equal(t, "sandboxes", del.Resource)
	assert.Equal(t, "soak-tvzrw", del.Namespace)
	assert.Equal(t, "c01-s2", del.Name)
	assert.Equal(t, int32(200), del.Code)
	assert.Equal(t, time.Date(2026, 11, 30, 0, 48, 31, 337433000, time.UTC), del.Received.UTC())
	assert.NotEmpty(t, del.BodyHash)
	assert.Equal(t, &Object{UID: "8d1bacbd-ea1e-4097-a6ee-56ff1989cf93"}, del.Object, "a delete names the uid it removed")
	assert.Equal(t, "watch", evs[1].Verb)
	assert.Empty(t, evs[1].BodyHash)
	assert.Nil(t, evs[1].Object)

	_, err = ReadAudit(strings.NewReader(auditLog + "{not json"))
	assert.ErrorContains(t, err, "audit event 4")
}

func TestReadObject(t *testing.T) {
	o, err := readObject([]byte(sandbox("u1", 7, false, 3)))
	require.NoError(t, err)
	assert.Equal(t, &Object{UID: "u1", ResourceVersion: "7", Generation: 1, Running: false, FenceUID: "f1", FenceGeneration: 3}, o)
	o, err = readObject([]byte(`{"kind":"Sandbox","metadata":{"uid":"u2","resourceVersion":"8"},"spec":{}}`))
	require.NoError(t, err)
	assert.True(t, o.Running, "operatingMode defaults to Running")
	o, err = readObject([]byte(fence(9, 4)))
	require.NoError(t, err)
	assert.Equal(t, &Object{UID: "f1", ResourceVersion: "9", Generation: 4}, o)
	_, err = readObject([]byte(`{"kind":"Sandbox","metadata":{"uid":"u","annotations":{"kubewire.io/fence-generation":"x"}}}`))
	assert.ErrorContains(t, err, "kubewire.io/fence-generation")
}

func TestAuditID(t *testing.T) {
	tests := []struct {
		give     string
		wantOp   string
		wantIdem bool
		wantOK   bool
	}{
		{AuditID(OpID(42), false), "op-000042", false, true},
		{AuditID(OpID(42), true), "op-000042", true, true},
		{"5b0e4f6a-6f0f-4c36-9b83-0f2b8a1c2d3e", "", false, false},
	}
	for _, tt := range tests {
		op, idem, ok := ParseAuditID(tt.give)
		assert.Equal(t, tt.wantOp, op, tt.give)
		assert.Equal(t, tt.wantIdem, idem, tt.give)
		assert.Equal(t, tt.wantOK, ok, tt.give)
	}
}

func TestStampContract(t *testing.T) {
	transporttest.TestMiddleware(t, Stamp)
}

// TestStamp: requests of an operation carry its Audit-ID, marked when the
// retry middleware would take them as idempotent; others carry none.
func TestStamp(t *testing.T) {
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got <- r.Header.Get("Audit-ID") }))
	defer srv.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: Stamp(tr)}
	tests := []struct {
		name   string
		ctx    context.Context
		method string
		want   string
	}{
		{"no operation", context.Background(), http.MethodPost, ""},
		{"a create", ContextWithOp(context.Background(), "op-000001"), http.MethodPost, "op-000001"},
		{"a get", ContextWithOp(context.Background(), "op-000002"), http.MethodGet, "op-000002/idempotent"},
		{"a patch marked idempotent", retry.ContextWithIdempotent(ContextWithOp(context.Background(), "op-000003")), http.MethodPatch, "op-000003/idempotent"},
		// RFC 9110 calls a DELETE idempotent; Kubernetes' rule wants a
		// precondition.
		{"a delete without preconditions", ContextWithOp(context.Background(), "op-000004"), http.MethodDelete, "op-000004"},
	}
	for _, tt := range tests {
		req, err := http.NewRequestWithContext(tt.ctx, tt.method, srv.URL, nil)
		require.NoError(t, err)
		resp, err := client.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, tt.want, <-got, tt.name)
		assert.Empty(t, req.Header.Get("Audit-ID"), "the caller's request is not changed")
	}
}

func TestHistoryRoundTrip(t *testing.T) {
	var b bytes.Buffer
	rec := NewRecorder(&b)
	ops := []Op{
		{ID: OpID(1), Client: 2, Kind: Create, Name: "c02-s0", Start: t0, End: t0.Add(time.Millisecond), Outcome: OK, Status: 201, State: state("u1", 10, true, 1)},
		{ID: OpID(2), Client: -1, Kind: Fence, Start: t0, End: t0, Outcome: Unknown, Error: "connection refused"},
	}
	for _, op := range ops {
		rec.Record(op)
	}
	require.NoError(t, rec.Flush())
	back, err := ReadHistory(&b)
	require.NoError(t, err)
	assert.Equal(t, ops, back)
}
