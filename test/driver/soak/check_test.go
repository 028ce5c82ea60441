package soak

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A hand-written world: namespace ns, the gateway's user gw, the fence f1
// at generation 1, then 2.
const (
	ns = "ns"
	gw = "gw"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// ev is one audit event, written as kube-apiserver writes it.
type ev struct {
	id, verb, user, res, sub, name string
	code                           int
	req, resp                      string
}

// line is the event as logged; i orders the events in time.
func (e ev) line(i int) string {
	group := "agents.x-k8s.io"
	if e.res == "networkpolicies" {
		group = "networking.k8s.io"
	}
	m := map[string]any{
		"kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "RequestResponse",
		"auditID": e.id, "stage": "ResponseComplete", "requestURI": "/apis/" + group + "/v1/namespaces/" + ns + "/" + e.res + "/" + e.name,
		"verb": e.verb, "user": map[string]any{"username": e.user, "groups": []string{"system:masters"}},
		"sourceIPs": []string{"127.0.0.1"}, "userAgent": "soak.test",
		"objectRef":                map[string]any{"resource": e.res, "namespace": ns, "name": e.name, "apiGroup": group, "apiVersion": "v1beta1", "subresource": e.sub},
		"responseStatus":           map[string]any{"metadata": map[string]any{}, "code": e.code},
		"requestReceivedTimestamp": t0.Add(time.Duration(i) * time.Millisecond).Format("2006-01-02T15:04:05.000000Z07:00"),
		"stageTimestamp":           t0.Add(time.Duration(i)*time.Millisecond + 500*time.Microsecond).Format("2006-01-02T15:04:05.000000Z07:00"),
	}
	if e.req != "" {
		m["requestObject"] = json.RawMessage(e.req)
	}
	if e.resp != "" {
		m["responseObject"] = json.RawMessage(e.resp)
	}
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// sandbox is a Sandbox as the API server answers a write.
func sandbox(uid string, rv int, running bool, fenceGen int) string {
	mode := "Running"
	if !running {
		mode = "Suspended"
	}
	return fmt.Sprintf(`{"kind":"Sandbox","apiVersion":"agents.x-k8s.io/v1beta1","metadata":{"name":"a","namespace":"ns","uid":%q,"resourceVersion":"%d","generation":1,"annotations":{"kubewire.io/fence-uid":"f1","kubewire.io/fence-generation":"%d"}},"spec":{"operatingMode":%q,"podTemplate":{"spec":{"containers":[{"name":"c","image":"i"}]}}}}`, uid, rv, fenceGen, mode)
}

// deleted is what a delete of a sandbox answers.
func deleted(uid string) string {
	return fmt.Sprintf(`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success","details":{"name":"a","group":"agents.x-k8s.io","kind":"sandboxes","uid":%q}}`, uid)
}

func fence(rv, gen int) string {
	return fmt.Sprintf(`{"kind":"NetworkPolicy","apiVersion":"networking.k8s.io/v1","metadata":{"name":"sandbox-workload-fence","namespace":"ns","uid":"f1","resourceVersion":"%d","generation":%d},"spec":{"podSelector":{}}}`, rv, gen)
}

// state is a sandbox as the API server holds it.
func state(uid string, rv int, running bool, fenceGen int) *State {
	return &State{Exists: true, UID: uid, ResourceVersion: fmt.Sprint(rv), Running: running, FenceUID: "f1", FenceGeneration: int64(fenceGen)}
}

// answer is a sandbox as the gateway answers it: without its
// resourceVersion.
func answer(uid string, running bool, fenceGen int) *State {
	return &State{Exists: true, UID: uid, Running: running, FenceUID: "f1", FenceGeneration: int64(fenceGen)}
}

func op(id string, kind Kind, at int, outcome Outcome, s *State) Op {
	return Op{ID: id, Kind: kind, Name: "a", Start: t0.Add(time.Duration(at) * time.Second), End: t0.Add(time.Duration(at)*time.Second + 10*time.Millisecond), Outcome: outcome, State: s}
}

func audit(t *testing.T, evs ...ev) []Event {
	t.Helper()
	var b strings.Builder
	for i, e := range evs {
		b.WriteString(e.line(i) + "\n")
	}
	out, err := ReadAudit(strings.NewReader(b.String()))
	require.NoError(t, err)
	return out
}

// The story every case starts from: op-1 creates a (running, fence 1),
// the controller writes its status, op-2 stops it.
func base() []ev {
	return []ev{
		{id: "op-000001", verb: "get", user: gw, res: "networkpolicies", name: "sandbox-workload-fence", code: 404},
		{id: "op-000001", verb: "create", user: gw, res: "networkpolicies", name: "sandbox-workload-fence", code: 201, req: `{"spec":{}}`, resp: fence(5, 1)},
		{id: "op-000001", verb: "create", user: gw, res: "sandboxes", name: "a", code: 201, req: `{"metadata":{"name":"a"}}`, resp: sandbox("u1", 10, true, 1)},
		{id: "srv-1", verb: "update", user: "controller", res: "sandboxes", sub: "status", name: "a", code: 200, req: `{"status":{}}`, resp: sandbox("u1", 11, true, 1)},
		{id: "op-000002/idempotent", verb: "get", user: gw, res: "sandboxes", name: "a", code: 200},
		{id: "op-000002/idempotent", verb: "patch", user: gw, res: "sandboxes", name: "a", code: 200, req: `{"metadata":{"resourceVersion":"11"},"spec":{"operatingMode":"Suspended"}}`, resp: sandbox("u1", 12, false, 1)},
		{id: "srv-2", verb: "watch", user: gw, res: "sandboxes", code: 200},
	}
}

func baseHistory() []Op {
	return []Op{
		op("op-000001", Create, 1, OK, answer("u1", true, 1)),
		op("op-000002", Stop, 2, OK, answer("u1", false, 1)),
	}
}

func TestCheckClean(t *testing.T) {
	evs := append(base(),
		ev{id: "op-000003", verb: "get", user: gw, res: "sandboxes", name: "a", code: 200, resp: sandbox("u1", 12, false, 1)},
		ev{id: "op-000004/idempotent", verb: "get", user: gw, res: "sandboxes", name: "a", code: 200},
		ev{id: "op-000004/idempotent", verb: "delete", user: gw, res: "sandboxes", name: "a", code: 200, req: `{"preconditions":{"uid":"u1"}}`, resp: deleted("u1")},
	)
	h := append(baseHistory(),
		op("op-000003", Get, 3, OK, answer("u1", false, 1)),
		op("op-000004", Delete, 4, OK, nil),
	)
	r := Check(Input{History: h, Audit: audit(t, evs...), GatewayUser: gw, Namespace: ns, Final: map[string]State{}, FinalFence: State{FenceUID: "f1", FenceGeneration: 1}})
	assert.False(t, r.Failed(), "%+v", r.Violations)
	assert.Empty(t, r.Violations)
	assert.Equal(t, 4, r.Ops)
	assert.Equal(t, 1, r.Sandboxes)
	assert.Equal(t, Percentiles{N: 4, P50: 2, P99: 3, Max: 3}, r.Amplification)
	assert.Equal(t, map[string]int{"watch": 1}, r.Background, "the informer's watch, no operation's")
	assert.Equal(t, 4, r.LatencyClean.N)
	assert.Equal(t, 10.0, r.LatencyClean.P50)
}

// TestCheckDuplicates: a write sent twice for one operation is found by
// its identical body; a create or an unmarked patch must not be, a marked
// patch is counted apart.
func TestCheckDuplicates(t *testing.T) {
	tests := []struct {
		name          string
		give          []ev
		wantWrites    int
		wantCreates   int
		wantReexec    int
		wantReapplied int
	}{
		{
			name: "create re-sent after a reset",
			give: []ev{{id: "op-000001", verb: "create", user: gw, res: "sandboxes", name: "a", code: 409, req: `{"metadata":{"name":"a"}}`}},
			// Even a create marked idempotent: a create is never.
			wantWrites: 1, wantCreates: 1,
		},
		{
			name:       "idempotent stop re-sent, its guard refused it",
			give:       []ev{{id: "op-000002/idempotent", verb: "patch", user: gw, res: "sandboxes", name: "a", code: 409, req: `{"metadata":{"resourceVersion":"11"},"spec":{"operatingMode":"Suspended"}}`}},
			wantReexec: 1,
		},
		{
			name: "unmarked start re-sent",
			give: []ev{
				{id: "op-000003", verb: "patch", user: gw, res: "sandboxes", name: "a", code: 200, req: `{"metadata":{"resourceVersion":"12"},"spec":{"operatingMode":"Running"}}`, resp: sandbox("u1", 13, true, 1)},
				{id: "op-000003", verb: "patch", user: gw, res: "sandboxes", name: "a", code: 409, req: `{"metadata":{"resourceVersion":"12"},"spec":{"operatingMode":"Running"}}`},
			},
			wantWrites: 1,
		},
		{
			name: "a second patch with another body is a new decision, not a copy",
			give: []ev{{id: "op-000002/idempotent", verb: "patch", user: gw, res: "sandboxes", name: "a", code: 409, req: `{"metadata":{"resourceVersion":"10"},"spec":{"operatingMode":"Suspended"}}`}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := baseHistory()
			if tt.name == "unmarked start re-sent" {
				h = append(h, op("op-000003", Start, 3, OK, answer("u1", true, 1)))
			}
			final := map[string]State{"a": *h[len(h)-1].State}
			r := Check(Input{History: h, Audit: audit(t, append(base(), tt.give...)...), GatewayUser: gw, Namespace: ns, Final: final, FinalFence: State{FenceUID: "f1", FenceGeneration: 1}})
			assert.Equal(t, tt.wantWrites, r.DuplicateWrites)
			assert.Equal(t, tt.wantCreates, r.DuplicateCreates)
			assert.Equal(t, tt.wantReexec, r.IdempotentReexecutions)
			assert.Equal(t, tt.wantReapplied, r.IdempotentReapplied)
			assert.Equal(t, tt.wantWrites > 0, r.Failed())
			assert.Zero(t, r.LostAcknowledged, "%+v", r.Violations)
		})
	}
}

// TestCheckLostAcknowledged: acknowledgements the record contradicts.
func TestCheckLostAcknowledged(t *testing.T) {
	tests := []struct {
		name    string
		history []Op
		audit   []ev
		final   State
		want    string
		// wantDetail, if set, is in every violation's detail.
		wantDetail string
	}{
		{
			name: "an acknowledged stop undone by a late write of an earlier operation",
			// op-3's start timed out; op-4 found the sandbox stopped and
			// said so; op-3's patch then reached the server.
			history: []Op{op("op-000003", Start, 3, Unknown, nil), op("op-000004", Stop, 4, OK, answer("u1", false, 1))},
			audit: []ev{
				{id: "op-000004/idempotent", verb: "get", user: gw, res: "sandboxes", name: "a", code: 200, resp: sandbox("u1", 12, false, 1)},
				{id: "op-000003", verb: "patch", user: gw, res: "sandboxes", name: "a", code: 200, req: `{"late":true}`, resp: sandbox("u1", 16, true, 1)},
			},
			final: *state("u1", 16, true, 1),
			want:  ViolationAckUndone,
		},
		{
			name:    "an acknowledged answer of an operation the record shows no read or write of",
			history: []Op{op("op-000003", Get, 3, OK, answer("u1", false, 1))},
			final:   *state("u1", 12, false, 1),
			// The answer is the state at rv 12, which op-2 wrote; op-3's
			// own read is not in the record.
			want:       ViolationAckNotRecorded,
			wantDetail: "the record holds no version of the sandbox that its requests read or wrote",
		},
		{
			name:       "an acknowledged answer whose intent the record contradicts",
			history:    []Op{op("op-000003", Get, 3, OK, answer("u1", true, 1))},
			audit:      []ev{{id: "op-000003", verb: "get", user: gw, res: "sandboxes", name: "a", code: 200, resp: sandbox("u1", 12, false, 1)}},
			final:      *state("u1", 12, false, 1),
			want:       ViolationAckNotRecorded,
			wantDetail: "answered running(fence 1), the record holds stopped at rv 12",
		},
		{
			name:    "an acknowledged delete the record does not show",
			history: []Op{op("op-000003", Delete, 3, OK, nil)},
			final:   *state("u1", 12, false, 1),
			want:    ViolationAckNotRecorded,
		},
		{
			name:    "a write by someone else",
			history: nil,
			audit:   []ev{{id: "srv-9", verb: "patch", user: "admin", res: "sandboxes", name: "a", code: 200, req: `{"x":1}`, resp: sandbox("u1", 14, true, 1)}},
			final:   *state("u1", 14, true, 1),
			want:    ViolationAckUndone,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Check(Input{History: append(baseHistory(), tt.history...), Audit: audit(t, append(base(), tt.audit...)...), GatewayUser: gw, Namespace: ns,
				Final: map[string]State{"a": tt.final}, FinalFence: State{FenceUID: "f1", FenceGeneration: 1}})
			require.NotEmpty(t, r.Violations)
			for _, v := range r.Violations {
				assert.Equal(t, tt.want, v.Kind, v.Detail)
				assert.Contains(t, v.Detail, tt.wantDetail)
			}
			assert.Equal(t, len(r.Violations), r.LostAcknowledged)
			assert.True(t, r.Failed())
		})
	}
}

// TestCheckReconciler: the reconciler may suspend a running sandbox once
// the fence moved past the one it was admitted under, and only then.
func TestCheckReconciler(t *testing.T) {
	start := []ev{
		{id: "op-000003", verb: "patch", user: gw, res: "sandboxes", name: "a", code: 200, req: `{"start":1}`, resp: sandbox("u1", 13, true, 1)},
	}
	moved := ev{id: "srv-3", verb: "update", user: "admin", res: "networkpolicies", name: "sandbox-workload-fence", code: 200, req: `{"spec":{}}`, resp: fence(14, 2)}
	suspend := ev{id: "srv-4", verb: "patch", user: gw, res: "sandboxes", name: "a", code: 200, req: `{"suspend":1}`, resp: sandbox("u1", 15, false, 1)}
	h := append(baseHistory(), op("op-000003", Start, 3, OK, answer("u1", true, 1)))

	r := Check(Input{History: h, Audit: audit(t, append(append(base(), start...), moved, suspend)...), GatewayUser: gw, Namespace: ns,
		Final: map[string]State{"a": *state("u1", 15, false, 1)}, FinalFence: State{FenceUID: "f1", FenceGeneration: 2}})
	assert.Empty(t, r.Violations)

	r = Check(Input{History: h, Audit: audit(t, append(append(base(), start...), suspend)...), GatewayUser: gw, Namespace: ns,
		Final: map[string]State{"a": *state("u1", 15, false, 1)}, FinalFence: State{FenceUID: "f1", FenceGeneration: 1}})
	require.Len(t, r.Violations, 1)
	assert.Equal(t, ViolationAckUndone, r.Violations[0].Kind)
	assert.Contains(t, r.Violations[0].Detail, "inside the live fence (generation 1)")
}

func TestCheckFinalState(t *testing.T) {
	tests := []struct {
		name  string
		final map[string]State
		fence int64
		want  string
	}{
		{"running, the record says stopped", map[string]State{"a": *state("u1", 12, true, 1)}, 1, ViolationFinalState},
		{"gone, the record says stopped", map[string]State{}, 1, ViolationFinalState},
		{"a sandbox no operation named", map[string]State{"a": *state("u1", 12, false, 1), "b": *state("u9", 3, false, 1)}, 1, ViolationFinalState},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Check(Input{History: baseHistory(), Audit: audit(t, base()...), GatewayUser: gw, Namespace: ns, Final: tt.final, FinalFence: State{FenceUID: "f1", FenceGeneration: tt.fence}})
			require.Len(t, r.Violations, 1, "%+v", r.Violations)
			assert.Equal(t, tt.want, r.Violations[0].Kind)
			assert.Equal(t, 1, r.StateDisagreements)
			assert.True(t, r.Failed())
		})
	}
}

func TestCheckNotConverged(t *testing.T) {
	h := []Op{op("op-000001", Create, 1, OK, answer("u1", true, 1))}
	r := Check(Input{History: h, Audit: audit(t, base()[:3]...), GatewayUser: gw, Namespace: ns,
		Final: map[string]State{"a": *state("u1", 10, true, 1)}, FinalFence: State{FenceUID: "f1", FenceGeneration: 2}})
	require.Len(t, r.Violations, 1)
	assert.Equal(t, ViolationNotConverged, r.Violations[0].Kind)
	assert.Equal(t, 1, r.StateDisagreements)
}

// TestCheckUnknownResolved: an operation whose answer was lost is
// resolved by the record: executed or not.
func TestCheckUnknownResolved(t *testing.T) {
	h := []Op{
		op("op-000001", Create, 1, Unknown, nil),
		op("op-000002", Stop, 2, Unknown, nil),
		op("op-000005", Start, 5, Unknown, nil),
	}
	r := Check(Input{History: h, Audit: audit(t, base()...), GatewayUser: gw, Namespace: ns,
		Final: map[string]State{"a": *state("u1", 12, false, 1)}, FinalFence: State{FenceUID: "f1", FenceGeneration: 1}})
	assert.Empty(t, r.Violations)
	assert.Equal(t, 2, r.Unknown.Applied)
	assert.Equal(t, 0, r.Unknown.Reached)
	assert.Equal(t, 1, r.Unknown.NotReached)
	assert.Equal(t, map[Outcome]int{Unknown: 1}, r.ByKind[Start])
}

func TestCheckLatencyUnderFaults(t *testing.T) {
	w := Window{Fault: "stall", From: t0.Add(2 * time.Second), To: t0.Add(2*time.Second + 5*time.Millisecond)}
	r := Check(Input{History: baseHistory(), Audit: audit(t, base()...), GatewayUser: gw, Namespace: ns,
		Final: map[string]State{"a": *state("u1", 12, false, 1)}, FinalFence: State{FenceUID: "f1", FenceGeneration: 1}, Faults: []Window{w}})
	assert.Equal(t, 1, r.LatencyClean.N)
	assert.Equal(t, 1, r.LatencyFaulted.N)
}

func TestPercentiles(t *testing.T) {
	v := make([]float64, 100)
	for i := range v {
		v[i] = float64(100 - i)
	}
	assert.Equal(t, Percentiles{N: 100, P50: 50, P99: 99, Max: 100}, percentiles(v))
	assert.Equal(t, Percentiles{N: 1, P50: 7, P99: 7, Max: 7}, percentiles([]float64{7}))
	assert.Equal(t, Percentiles{}, percentiles(nil))
}

// TestCheckUnexplained: a change of intent after an operation whose answer
// was lost, by a client that is no operation and not the reconciler.
func TestCheckUnexplained(t *testing.T) {
	h := []Op{op("op-000001", Create, 1, Unknown, nil)}
	evs := append(base()[:3], ev{id: "srv-9", verb: "patch", user: "admin", res: "sandboxes", name: "a", code: 200, req: `{"x":1}`, resp: sandbox("u1", 14, false, 1)})
	r := Check(Input{History: h, Audit: audit(t, evs...), GatewayUser: gw, Namespace: ns,
		Final: map[string]State{"a": *state("u1", 14, false, 1)}, FinalFence: State{FenceUID: "f1", FenceGeneration: 1}})
	require.Len(t, r.Violations, 1)
	assert.Equal(t, ViolationUnexplained, r.Violations[0].Kind)
	assert.Equal(t, 1, r.StateDisagreements)
}

// TestCheckAnswered5xx: a write whose client went away while it was in
// flight is logged 504, yet applied; what follows in the record shows it.
func TestCheckAnswered5xx(t *testing.T) {
	t.Run("a delete answered 504, then 404 to the retry", func(t *testing.T) {
		evs := append(base(),
			ev{id: "op-000003/idempotent", verb: "get", user: gw, res: "sandboxes", name: "a", code: 200, resp: sandbox("u1", 12, false, 1)},
			ev{id: "op-000003/idempotent", verb: "delete", user: gw, res: "sandboxes", name: "a", code: 504, req: `{"preconditions":{"uid":"u1"}}`},
			ev{id: "op-000003/idempotent", verb: "delete", user: gw, res: "sandboxes", name: "a", code: 404, req: `{"preconditions":{"uid":"u1"}}`},
		)
		h := append(baseHistory(), op("op-000003", Delete, 3, OK, nil))
		r := Check(Input{History: h, Audit: audit(t, evs...), GatewayUser: gw, Namespace: ns, Final: map[string]State{}, FinalFence: State{FenceUID: "f1", FenceGeneration: 1}})
		assert.Empty(t, r.Violations)
		assert.Equal(t, 1, r.IdempotentReexecutions)
	})
	t.Run("a start answered 504; the driver's read shows it applied", func(t *testing.T) {
		evs := append(base(),
			ev{id: "op-000003", verb: "patch", user: gw, res: "sandboxes", name: "a", code: 504, req: `{"metadata":{"resourceVersion":"12"}}`},
			ev{id: "op-000004", verb: "get", user: gw, res: "sandboxes", name: "a", code: 200, resp: sandbox("u1", 13, true, 1)},
		)
		h := append(baseHistory(), op("op-000003", Start, 3, Unknown, nil), op("op-000004", Get, 4, OK, answer("u1", true, 1)))
		r := Check(Input{History: h, Audit: audit(t, evs...), GatewayUser: gw, Namespace: ns, Final: map[string]State{"a": *state("u1", 13, true, 1)}, FinalFence: State{FenceUID: "f1", FenceGeneration: 1}})
		assert.Empty(t, r.Violations)
		assert.Equal(t, 1, r.Unknown.Reached)
	})
	t.Run("a start answered 504 at the end of the run; only the final state shows it", func(t *testing.T) {
		evs := append(base(),
			ev{id: "op-000003", verb: "patch", user: gw, res: "sandboxes", name: "a", code: 504, req: `{"metadata":{"resourceVersion":"12"}}`},
		)
		h := append(baseHistory(), op("op-000003", Start, 3, Unknown, nil))
		r := Check(Input{History: h, Audit: audit(t, evs...), GatewayUser: gw, Namespace: ns, Final: map[string]State{"a": *state("u1", 13, true, 1)}, FinalFence: State{FenceUID: "f1", FenceGeneration: 1}})
		assert.Empty(t, r.Violations)
	})
	t.Run("a change only a read shows, and no write answered 5xx", func(t *testing.T) {
		evs := append(base(), ev{id: "op-000004", verb: "get", user: gw, res: "sandboxes", name: "a", code: 200, resp: sandbox("u1", 13, true, 1)})
		h := append(baseHistory(), op("op-000004", Get, 4, OK, answer("u1", true, 1)))
		r := Check(Input{History: h, Audit: audit(t, evs...), GatewayUser: gw, Namespace: ns, Final: map[string]State{"a": *state("u1", 13, true, 1)}, FinalFence: State{FenceUID: "f1", FenceGeneration: 1}})
		require.Len(t, r.Violations, 1, "%+v", r.Violations)
		assert.Equal(t, ViolationAckUndone, r.Violations[0].Kind)
		assert.Contains(t, r.Violations[0].Detail, "no write answered 5xx explains it")
	})
}

// TestCheckUnanswered: a replica killed while it ran a write may have
// stored it and logged nothing of it. The API proxy's record of the write
// it sent and got no answer to stands in for the missing audit event, as
// a 5xx answer does: a write that may have been applied.
func TestCheckUnanswered(t *testing.T) {
	// The audit log's events are a millisecond apart: the start was sent
	// just before op-000004's get, the eighth event.
	evs := append(base(), ev{id: "op-000004", verb: "get", user: gw, res: "sandboxes", name: "a", code: 200, resp: sandbox("u1", 13, true, 1)})
	h := append(baseHistory(), op("op-000003", Start, 3, Unknown, nil), op("op-000004", Get, 4, OK, answer("u1", true, 1)))
	killed := map[string][]Upstream{"op-000003": {{Cause: CauseConnLoss, Error: "read: connection reset by peer",
		Unanswered: &Unanswered{Verb: "patch", Resource: "sandboxes", Namespace: ns, Name: "a", At: t0.Add(6 * time.Millisecond)}}}}
	in := Input{History: h, Audit: audit(t, evs...), GatewayUser: gw, Namespace: ns, Final: map[string]State{"a": *state("u1", 13, true, 1)}, FinalFence: State{FenceUID: "f1", FenceGeneration: 1}}

	r := Check(in)
	require.Len(t, r.Violations, 1, "without the proxy's record the start is no one's: %+v", r.Violations)
	assert.Equal(t, ViolationAckUndone, r.Violations[0].Kind)

	in.Causes = killed
	r = Check(in)
	assert.Empty(t, r.Violations, "the start the killed replica ran unlogged")
	assert.False(t, r.Failed())
}

func TestUnansweredWrite(t *testing.T) {
	at := t0
	tests := []struct {
		name, method, path, body string
		want                     *Unanswered
	}{
		{name: "create", method: http.MethodPost, path: "/apis/agents.x-k8s.io/v1beta1/namespaces/ns/sandboxes", body: `{"metadata":{"name":"a"}}`,
			want: &Unanswered{Verb: "create", Resource: "sandboxes", Namespace: "ns", Name: "a", At: at}},
		{name: "patch", method: http.MethodPatch, path: "/apis/agents.x-k8s.io/v1beta1/namespaces/ns/sandboxes/a",
			want: &Unanswered{Verb: "patch", Resource: "sandboxes", Namespace: "ns", Name: "a", At: at}},
		{name: "status", method: http.MethodPut, path: "/apis/agents.x-k8s.io/v1beta1/namespaces/ns/sandboxes/a/status",
			want: &Unanswered{Verb: "update", Resource: "sandboxes", Namespace: "ns", Name: "a", At: at}},
		{name: "delete", method: http.MethodDelete, path: "/apis/networking.k8s.io/v1/namespaces/ns/networkpolicies/f",
			want: &Unanswered{Verb: "delete", Resource: "networkpolicies", Namespace: "ns", Name: "f", At: at}},
		{name: "get", method: http.MethodGet, path: "/apis/agents.x-k8s.io/v1beta1/namespaces/ns/sandboxes/a"},
		{name: "cluster-scoped", method: http.MethodPost, path: "/api/v1/namespaces", body: `{"metadata":{"name":"ns"}}`},
		{name: "create without a name", method: http.MethodPost, path: "/api/v1/namespaces/ns/configmaps", body: `{"metadata":{"generateName":"x-"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(tt.method, tt.path, nil)
			assert.Equal(t, tt.want, unanswered(r, []byte(tt.body), at))
		})
	}
}
