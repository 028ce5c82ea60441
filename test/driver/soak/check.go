package soak

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"
)

// Input is what [Check] judges: the history of client operations and the
// API server's audit log, and the state the run ended in.
type Input struct {
	History []Op
	Audit   []Event
	// GatewayUser is the API server user of the gateway: its requests that
	// carry no operation are the reconciler's and the informers'.
	GatewayUser string
	// Namespace holds the sandboxes and the fence.
	Namespace string
	// Final is each sandbox's state after the run, read directly from the
	// API server, by name; a sandbox that does not exist is left out.
	Final map[string]State
	// FinalFence is the fence after the run (FenceUID, FenceGeneration).
	FinalFence State
	// Faults are the windows in which faults acted, to tell latency under
	// faults from latency without, and to file failures by window.
	Faults []Window
	// Causes are, by operation, the causes of its API requests that failed
	// on the way to the API server, in order (see [Failure.Upstream]).
	Causes map[string][]Upstream
}

// Window is a time interval in which a fault acted.
type Window struct {
	Fault  string    `json:"fault"`
	From   time.Time `json:"from"`
	To     time.Time `json:"to"`
	Detail string    `json:"detail,omitempty"`
}

// Violation is one thing the checker found wrong.
type Violation struct {
	// Kind is one of the Violation* constants.
	Kind   string `json:"kind"`
	Name   string `json:"name,omitempty"`
	Op     string `json:"op,omitempty"`
	Detail string `json:"detail"`
}

// The kinds of violations.
const (
	// ViolationDuplicate: a write not marked idempotent (any create) was
	// executed more than once for one operation.
	ViolationDuplicate = "duplicate-write"
	// ViolationAckNotRecorded: an acknowledged answer names a state the
	// audit log never shows the sandbox in.
	ViolationAckNotRecorded = "ack-not-in-record"
	// ViolationAckUndone: a write that the acknowledging operation did not
	// order, and no later operation or fence change explains, changed the
	// sandbox after an acknowledgement.
	ViolationAckUndone = "ack-undone"
	// ViolationUnexplained: a change of a sandbox's intent that no
	// operation on it ordered, and that is not the reconciler suspending it
	// for a fence change.
	ViolationUnexplained = "unexplained-write"
	// ViolationFinalState: the sandbox's final state is not what the
	// history and the record imply.
	ViolationFinalState = "final-state"
	// ViolationNotConverged: a sandbox still runs outside the final fence.
	ViolationNotConverged = "not-converged"
)

// Duplicate is a write executed more than once for one operation: the
// same verb on the same object with the same request body.
type Duplicate struct {
	Op         string `json:"op"`
	Verb       string `json:"verb"`
	Resource   string `json:"resource"`
	Name       string `json:"name"`
	Idempotent bool   `json:"idempotent"`
	// Executions is how many times the API server executed it; Applied
	// how many of those it answered 2xx.
	Executions int `json:"executions"`
	Applied    int `json:"applied"`
}

// Percentiles summarises a distribution.
type Percentiles struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

func percentiles(v []float64) Percentiles {
	if len(v) == 0 {
		return Percentiles{}
	}
	s := slices.Clone(v)
	slices.Sort(s)
	rank := func(p float64) float64 {
		i := int(p*float64(len(s)) + 0.999999)
		return s[min(max(i-1, 0), len(s)-1)]
	}
	return Percentiles{N: len(s), P50: rank(0.50), P99: rank(0.99), Max: s[len(s)-1]}
}

// Result is the checker's verdict on the history and the audit log.
type Result struct {
	Ops    int                      `json:"ops"`
	ByKind map[Kind]map[Outcome]int `json:"byKind"`
	// Unknown counts the writes whose outcome the client did not learn,
	// by what the audit log shows: answered 2xx, reached the API server
	// without a success answer, never reached it.
	Unknown    struct{ Applied, Reached, NotReached int } `json:"unknownWrites"`
	Sandboxes  int                                        `json:"sandboxes"`
	Duplicates []Duplicate                                `json:"duplicates,omitempty"`
	// DuplicateWrites counts executions beyond the first of writes not
	// marked idempotent, creates included; DuplicateCreates the creates
	// among them. Both must be 0.
	DuplicateWrites  int `json:"duplicateWrites"`
	DuplicateCreates int `json:"duplicateCreates"`
	// IdempotentReexecutions counts executions beyond the first of writes
	// marked idempotent; IdempotentReapplied those the API server answered
	// 2xx (the rest failed on their resourceVersion or uid guard).
	IdempotentReexecutions int `json:"idempotentReexecutions"`
	IdempotentReapplied    int `json:"idempotentReapplied"`
	// LostAcknowledged counts acknowledged operations the record or the
	// final state contradicts; StateDisagreements sandboxes whose final
	// state is not what the history implies, or that did not converge.
	// Both must be 0.
	LostAcknowledged   int         `json:"lostAcknowledged"`
	StateDisagreements int         `json:"stateDisagreements"`
	Violations         []Violation `json:"violations,omitempty"`
	// Amplification is API requests executed per client operation.
	Amplification Percentiles `json:"amplification"`
	// Background counts the gateway's requests that belong to no client
	// operation (informers, reconciler), by verb.
	Background map[string]int `json:"background"`
	// Latency of client operations through the gateway, in milliseconds,
	// of those no fault window overlaps and of the others.
	LatencyClean   Percentiles `json:"latencyCleanMs"`
	LatencyFaulted Percentiles `json:"latencyFaultedMs"`
	// FailuresByCause counts the operations that did not succeed (failed
	// or unknown) by cause, every cause of [causeNames] in its order, and
	// by the fault window each overlaps; Failures lists them.
	FailuresByCause []CauseCount `json:"failuresByCause"`
	Failures        []Failure    `json:"failures,omitempty"`
}

// Failed reports whether the result breaks a rule that must hold.
func (r *Result) Failed() bool {
	return r.DuplicateWrites > 0 || r.LostAcknowledged > 0 || r.StateDisagreements > 0
}

// entry is one version of a sandbox in the record, or its deletion.
type entry struct {
	rv      uint64
	deleted bool
	state   State
	// at is when the API server received the request that wrote it, or
	// that first read it.
	at time.Time
	// op and byGW name the writer; read is set when only a read shows the
	// version, and carried when a write shows it that cannot have changed
	// the intent (a write of the status subresource): then the writer is
	// a write the record holds no answer of (see maybeWrite).
	op           string
	byGW         bool
	verb, sub    string
	read, maybeW bool
}

// maybeWrite is a write of a sandbox the API server answered 5xx or not
// at all: it may have been applied.
type maybeWrite struct {
	op   string
	byGW bool
	verb string
	at   time.Time
}

// fenceVersion is one state of the fence in the record.
type fenceVersion struct {
	rv  uint64
	uid string
	gen int64
}

// Check judges the history against the audit log and the final state.
func Check(in Input) *Result {
	r := &Result{ByKind: map[Kind]map[Outcome]int{}, Background: map[string]int{}}
	byName := map[string][]*Op{}
	for i := range in.History {
		op := &in.History[i]
		if r.ByKind[op.Kind] == nil {
			r.ByKind[op.Kind] = map[Outcome]int{}
		}
		r.ByKind[op.Kind][op.Outcome]++
		if op.Kind != Fence {
			byName[op.Name] = append(byName[op.Name], op)
		}
	}
	r.Ops = len(in.History)
	r.Sandboxes = len(byName)
	for _, list := range byName {
		slices.SortFunc(list, func(a, b *Op) int { return a.Start.Compare(b.Start) })
	}

	r.duplicates(in)
	r.amplification(in)
	r.latency(in)
	r.failures(in)

	record, fences := records(in)
	reached, applied := map[string]bool{}, map[string]bool{}
	for _, e := range in.Audit {
		if op, _, ok := ParseAuditID(e.AuditID); ok && e.write() {
			reached[op] = true
			applied[op] = applied[op] || e.ok()
		}
	}
	for _, op := range in.History {
		if op.Outcome == Unknown && op.Kind.writes() {
			switch {
			case applied[op.ID]:
				r.Unknown.Applied++
			case reached[op.ID]:
				r.Unknown.Reached++
			default:
				r.Unknown.NotReached++
			}
		}
	}
	names := make([]string, 0, len(byName))
	for name := range byName {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		newSandboxCheck(r, name, byName[name], record[name], fences, in).check()
	}
	for name := range in.Final {
		if _, ok := byName[name]; !ok {
			r.violate(Violation{Kind: ViolationFinalState, Name: name, Detail: "exists, but no operation of the history names it"})
		}
	}
	for _, v := range r.Violations {
		switch v.Kind {
		case ViolationAckNotRecorded, ViolationAckUndone:
			r.LostAcknowledged++
		case ViolationFinalState, ViolationNotConverged, ViolationUnexplained:
			r.StateDisagreements++
		}
	}
	return r
}

func (r *Result) violate(v Violation) { r.Violations = append(r.Violations, v) }

// duplicates finds writes executed more than once for one operation.
func (r *Result) duplicates(in Input) {
	type key struct{ op, verb, resource, sub, ns, name, body string }
	seen := map[key]*Duplicate{}
	var order []key
	for _, e := range in.Audit {
		op, idem, ok := ParseAuditID(e.AuditID)
		if !ok || !e.write() || e.BodyHash == "" {
			continue
		}
		k := key{op, e.Verb, e.Resource, e.Subresource, e.Namespace, e.Name, e.BodyHash}
		d := seen[k]
		if d == nil {
			d = &Duplicate{Op: op, Verb: e.Verb, Resource: e.Resource, Name: e.Name, Idempotent: idem && e.Verb != "create"}
			seen[k] = d
			order = append(order, k)
		}
		d.Executions++
		if e.ok() {
			d.Applied++
		}
	}
	for _, k := range order {
		d := seen[k]
		if d.Executions < 2 {
			continue
		}
		r.Duplicates = append(r.Duplicates, *d)
		extra := d.Executions - 1
		if d.Idempotent {
			r.IdempotentReexecutions += extra
			r.IdempotentReapplied += max(d.Applied-1, 0)
			continue
		}
		r.DuplicateWrites += extra
		if d.Verb == "create" {
			r.DuplicateCreates += extra
		}
		r.violate(Violation{Kind: ViolationDuplicate, Name: d.Name, Op: d.Op,
			Detail: fmt.Sprintf("%s %s executed %d times (%d answered 2xx)", d.Verb, d.Resource, d.Executions, d.Applied)})
	}
}

func (r *Result) amplification(in Input) {
	per := map[string]int{}
	for _, e := range in.Audit {
		if op, _, ok := ParseAuditID(e.AuditID); ok {
			per[op]++
			continue
		}
		if e.User == in.GatewayUser {
			r.Background[e.Verb]++
		}
	}
	var v []float64
	for _, op := range in.History {
		if op.Kind != Fence {
			v = append(v, float64(per[op.ID]))
		}
	}
	r.Amplification = percentiles(v)
}

func (r *Result) latency(in Input) {
	var clean, faulted []float64
	for _, op := range in.History {
		if op.Kind == Fence {
			continue
		}
		ms := float64(op.End.Sub(op.Start).Microseconds()) / 1000
		if slices.ContainsFunc(in.Faults, func(w Window) bool { return w.From.Before(op.End) && !w.To.Before(op.Start) }) {
			faulted = append(faulted, ms)
		} else {
			clean = append(clean, ms)
		}
	}
	r.LatencyClean, r.LatencyFaulted = percentiles(clean), percentiles(faulted)
}

// record is what the audit log shows of one sandbox: its versions and
// deletions in order, the writes that may have been applied unseen, and
// the version each operation's answer describes.
type record struct {
	es     []entry
	maybes []maybeWrite
	// answered is, by operation, the newest version of the sandbox that
	// its own requests read or wrote: the gateway answers from the
	// driver's last request, and its answer carries no resourceVersion.
	answered map[string]version
}

// version names one version of a sandbox.
type version struct {
	uid string
	rv  uint64
}

// loggedWrite is a write the audit log holds, by operation, verb and
// sandbox.
type loggedWrite struct{ op, verb, name string }

// addUnanswered adds to out the writes the API proxy sent and got no answer
// to that the audit log holds nothing of (logged): an API server that died
// before it logged such a write may have applied it, so it is a maybe, as
// one answered 5xx is. Deletes go to maybeDeletes, as records files them.
func addUnanswered(in Input, logged map[loggedWrite]bool, out map[string]*record, versions map[string]map[version]entry, maybeDeletes map[string][]entry) {
	for _, op := range slices.Sorted(maps.Keys(in.Causes)) {
		for _, u := range in.Causes[op] {
			w := u.Unanswered
			if w == nil || w.Namespace != in.Namespace || w.Resource != "sandboxes" || logged[loggedWrite{op, w.Verb, w.Name}] {
				continue
			}
			if out[w.Name] == nil {
				out[w.Name] = &record{answered: map[string]version{}}
				versions[w.Name] = map[version]entry{}
			}
			if w.Verb == "delete" {
				maybeDeletes[w.Name] = append(maybeDeletes[w.Name], entry{op: op, byGW: true, verb: w.Verb, at: w.At, deleted: true, maybeW: true})
				continue
			}
			out[w.Name].maybes = append(out[w.Name].maybes, maybeWrite{op: op, byGW: true, verb: w.Verb, at: w.At})
		}
	}
}

// records orders the versions of each sandbox by resourceVersion:
// kube-apiserver's resourceVersions are etcd revisions, one sequence for
// the whole cluster. A version is known from the answer of a successful
// write or get. A delete answers no resourceVersion, only the uid it
// removed: it comes right after the last version of that uid. A delete
// answered 5xx counts as applied when no other delete of the uid succeeded
// and the uid is never seen after it. The fence's versions come from its
// successful writes.
func records(in Input) (map[string]*record, []fenceVersion) {
	versions := map[string]map[version]entry{}
	deletes := map[string][]entry{}
	maybeDeletes := map[string][]entry{}
	out := map[string]*record{}
	var fences []fenceVersion
	logged := map[loggedWrite]bool{}
	for _, e := range in.Audit {
		if e.Namespace != in.Namespace {
			continue
		}
		op, _, _ := ParseAuditID(e.AuditID)
		if e.write() {
			logged[loggedWrite{op, e.Verb, e.Name}] = true
		}
		if e.Resource == "networkpolicies" {
			if e.write() && e.ok() && e.Object != nil && e.Verb != "delete" {
				fences = append(fences, fenceVersion{rv: parseRV(e.Object.ResourceVersion), uid: e.Object.UID, gen: e.Object.Generation})
			}
			continue
		}
		if e.Resource != "sandboxes" || !e.write() && e.Verb != "get" {
			continue
		}
		if out[e.Name] == nil {
			out[e.Name] = &record{answered: map[string]version{}}
			versions[e.Name] = map[version]entry{}
		}
		en := entry{op: op, byGW: e.User == in.GatewayUser, verb: e.Verb, sub: e.Subresource, at: e.Received}
		switch {
		case e.Verb == "delete" && e.ok() && e.Object != nil:
			en.deleted, en.state.UID = true, e.Object.UID
			deletes[e.Name] = append(deletes[e.Name], en)
		case e.Verb == "delete" && e.maybe():
			en.deleted, en.maybeW = true, true
			maybeDeletes[e.Name] = append(maybeDeletes[e.Name], en)
		case e.write() && e.maybe():
			out[e.Name].maybes = append(out[e.Name].maybes, maybeWrite{op: op, byGW: en.byGW, verb: e.Verb, at: e.Received})
		case e.ok() && e.Object != nil:
			en.state, en.rv = e.Object.state(), parseRV(e.Object.ResourceVersion)
			en.read = e.Verb == "get" || e.Subresource == "status"
			k := version{en.state.UID, en.rv}
			if old, ok := versions[e.Name][k]; !ok || old.read && !en.read || old.read && en.read && en.at.Before(old.at) {
				versions[e.Name][k] = en
			}
			if v, ok := out[e.Name].answered[op]; op != "" && (!ok || v.rv < en.rv) {
				out[e.Name].answered[op] = k
			}
		}
	}
	addUnanswered(in, logged, out, versions, maybeDeletes)
	for name, r := range out {
		for _, en := range versions[name] {
			r.es = append(r.es, en)
		}
		slices.SortFunc(r.es, func(a, b entry) int { return cmp.Compare(a.rv, b.rv) })
		dels := deletes[name]
		for _, d := range maybeDeletes[name] {
			// The uid of a delete answered 5xx is the one the op's
			// preconditions named; the last version before it stands in.
			i := lastBefore(r.es, d.at)
			if i < 0 {
				continue
			}
			d.state.UID = r.es[i].state.UID
			gone := !slices.ContainsFunc(dels, func(x entry) bool { return x.state.UID == d.state.UID }) &&
				!slices.ContainsFunc(r.es, func(x entry) bool { return x.state.UID == d.state.UID && x.at.After(d.at) })
			if _, final := in.Final[name]; gone && (!final || in.Final[name].UID != d.state.UID) &&
				!slices.ContainsFunc(dels, func(x entry) bool { return x.state.UID == d.state.UID }) {
				dels = append(dels, d)
			}
		}
		for _, d := range dels {
			i := -1
			for j, x := range r.es {
				if !x.deleted && x.state.UID == d.state.UID {
					i = j
				}
			}
			if i < 0 {
				r.es = append(r.es, d)
				continue
			}
			d.rv = r.es[i].rv
			r.es = slices.Insert(r.es, i+1, d)
		}
	}
	slices.SortFunc(fences, func(a, b fenceVersion) int { return cmp.Compare(a.rv, b.rv) })
	return out, fences
}

// lastBefore returns the index of the last version received before t.
func lastBefore(es []entry, t time.Time) int {
	i := -1
	for j, e := range es {
		if !e.deleted && e.at.Before(t) && (i < 0 || e.rv > es[i].rv) {
			i = j
		}
	}
	return i
}

func parseRV(s string) uint64 {
	v, _ := strconv.ParseUint(s, 10, 64)
	return v
}

// sandboxCheck judges one sandbox: every acknowledgement is in the
// record, nothing but a later operation or the reconciler's suspension
// for a fence change undoes it, and the final state is the record's last.
type sandboxCheck struct {
	r    *Result
	name string
	// history is the sandbox's operations, by start.
	history  []*Op
	es       []entry
	maybes   []maybeWrite
	answered map[string]version
	fences   []fenceVersion
	// final is the sandbox's state after the run, if it exists.
	final      State
	exists     bool
	finalFence State

	// index is each operation's position in history, by ID.
	index map[string]int
	// states[i] is the sandbox's state after es[i].
	states []State
	// reported holds the changes ackHeld found undoing an
	// acknowledgement, so changesExplained does not report them again.
	reported map[int]bool
}

func newSandboxCheck(r *Result, name string, history []*Op, rec *record, fences []fenceVersion, in Input) *sandboxCheck {
	if rec == nil {
		rec = &record{}
	}
	c := &sandboxCheck{r: r, name: name, history: history, es: rec.es, maybes: rec.maybes, answered: rec.answered, fences: fences,
		finalFence: in.FinalFence, index: map[string]int{}, states: make([]State, len(rec.es)), reported: map[int]bool{}}
	c.final, c.exists = in.Final[name]
	for i, op := range history {
		c.index[op.ID] = i
	}
	for i, e := range c.es {
		if !e.deleted {
			c.states[i] = e.state
		}
	}
	return c
}

// check applies the rules in turn. A final state the record does not
// explain is one violation, not also one of the fence.
func (c *sandboxCheck) check() {
	for hi, op := range c.history {
		if op.Outcome != OK || !(op.Kind.writes() || op.Kind == Get) {
			continue
		}
		if pos, ok := c.ackInRecord(op); ok && op.Kind != Get {
			c.ackHeld(hi, pos)
		}
	}
	c.changesExplained()
	if c.finalAsRecorded() {
		c.finalInFence()
	}
}

func (c *sandboxCheck) violate(kind, op, detail string) {
	c.r.violate(Violation{Kind: kind, Name: c.name, Op: op, Detail: detail})
}

// before is the sandbox's state before es[i].
func (c *sandboxCheck) before(i int) State {
	if i == 0 {
		return State{}
	}
	return c.states[i-1]
}

// changesIntent reports whether es[i] changed what the sandbox should be.
func (c *sandboxCheck) changesIntent(i int) bool { return !c.before(i).sameIntent(c.states[i]) }

// ackInRecord checks that the record holds what the acknowledged op
// answered, and returns where: a delete's deletion, or the version a
// write or get answered, the newest its own requests read or wrote. ok is
// false if it does not, or if op answered no sandbox.
func (c *sandboxCheck) ackInRecord(op *Op) (pos int, ok bool) {
	switch {
	case op.Kind == Delete:
		pos = slices.IndexFunc(c.es, func(e entry) bool { return e.deleted && e.op == op.ID })
		if pos < 0 {
			c.violate(ViolationAckNotRecorded, op.ID, "acknowledged delete, but the record shows no delete of the sandbox by it")
			return pos, false
		}
	case op.State == nil || !op.State.Exists:
		return -1, false
	default:
		v, ok := c.answered[op.ID]
		pos = slices.IndexFunc(c.es, func(e entry) bool { return ok && !e.deleted && e.state.UID == v.uid && e.rv == v.rv })
		if pos < 0 {
			c.violate(ViolationAckNotRecorded, op.ID, fmt.Sprintf("acknowledged %s answered %s, but the record holds no version of the sandbox that its requests read or wrote", op.Kind, op.State))
			return pos, false
		}
		if !c.states[pos].sameIntent(*op.State) {
			c.violate(ViolationAckNotRecorded, op.ID, fmt.Sprintf("acknowledged %s answered %s, the record holds %s", op.Kind, op.State, c.states[pos]))
			return pos, false
		}
	}
	return pos, true
}

// ackHeld checks that the state history[acked] acknowledged at es[pos]
// holds until the next change of intent, which must be explained; after
// it, that change is what holds.
func (c *sandboxCheck) ackHeld(acked, pos int) {
	for i := pos + 1; i < len(c.es); i++ {
		if !c.changesIntent(i) {
			continue
		}
		if ok, why := c.explained(i, acked); !ok {
			op := c.history[acked]
			c.violate(ViolationAckUndone, op.ID, fmt.Sprintf("acknowledged %s undone: %s", op.Kind, why))
			c.reported[i] = true
		}
		return
	}
}

// changesExplained checks that a change no acknowledgement preceded is
// still someone's.
func (c *sandboxCheck) changesExplained() {
	for i := range c.es {
		if c.reported[i] || !c.changesIntent(i) {
			continue
		}
		if ok, why := c.explained(i, -1); !ok {
			c.violate(ViolationUnexplained, "", why)
		}
	}
}

// explained reports whether es[i], which changed the intent, may come
// after the acknowledgement of history[acked] (-1: of none): it is a
// later operation's write, or the reconciler suspending a sandbox the
// fence moved past; or, when the record holds no answer of the write
// that made the version, a write of such a kind that the API server
// answered 5xx or not at all before the version was seen.
func (c *sandboxCheck) explained(i, acked int) (bool, string) {
	e := c.es[i]
	b, a := c.before(i), c.states[i]
	suspends := e.byGW && b.Exists && a.Exists && b.UID == a.UID && b.Running && !a.Running
	if !e.read {
		if j, ok := c.index[e.op]; ok {
			if j > acked {
				return true, ""
			}
			return false, fmt.Sprintf("%s by %s after the acknowledged version", e.verb, e.op)
		}
		if e.op != "" {
			return false, fmt.Sprintf("%s by %s, an operation on another sandbox", e.verb, e.op)
		}
		if suspends {
			if c.staleFence(e.rv, b) {
				return true, ""
			}
			return false, fmt.Sprintf("the reconciler suspended it at rv %d inside the live fence (generation %d)", e.rv, b.FenceGeneration)
		}
	}
	for _, m := range c.maybes {
		if !m.at.Before(e.at) {
			continue
		}
		if j, ok := c.index[m.op]; ok && j > acked {
			return true, ""
		}
		if m.op == "" && m.byGW && b.Running && !a.Running && c.staleFence(e.rv, b) {
			return true, ""
		}
	}
	return false, fmt.Sprintf("%s%s at rv %d by %s: %s -> %s, and no write answered 5xx explains it", e.verb, sub(e.sub), e.rv, writer(e), b, a)
}

// staleFence reports whether the live fence at revision rv is not the one
// state b ran inside.
func (c *sandboxCheck) staleFence(rv uint64, b State) bool {
	live, ok := fenceAt(c.fences, rv)
	return !ok || live.uid != b.FenceUID || live.gen != b.FenceGeneration
}

// last is the record's last state of the sandbox.
func (c *sandboxCheck) last() State {
	if len(c.states) == 0 {
		return State{}
	}
	return c.states[len(c.states)-1]
}

// finalAsRecorded checks that the final state is the record's last, and
// reports whether it is, or may be.
func (c *sandboxCheck) finalAsRecorded() bool {
	last := c.last()
	if (c.exists != last.Exists || c.exists && !c.final.sameIntent(last)) && !c.lateWrite(last) {
		c.violate(ViolationFinalState, "", fmt.Sprintf("final state %s, the record's last %s", stateOf(c.final, c.exists), last))
		return false
	}
	return true
}

// lateWrite reports whether a write may have made the final state, which
// is read by a list the audit log does not hold: a write answered 5xx
// after the record's last version (one cut at the end of the run), as it
// may have made any version a read shows, or the reconciler suspending
// the sandbox by a write answered 5xx.
func (c *sandboxCheck) lateWrite(last State) bool {
	for _, m := range c.maybes {
		if len(c.es) > 0 && !m.at.After(c.es[len(c.es)-1].at) {
			continue
		}
		if _, ok := c.index[m.op]; ok || m.op == "" && m.byGW && last.Running && !c.final.Running {
			return true
		}
	}
	return false
}

// finalInFence checks that the sandbox, if it runs at the end, runs
// inside the final fence.
func (c *sandboxCheck) finalInFence() {
	if c.exists && c.final.Running && (c.final.FenceUID != c.finalFence.FenceUID || c.final.FenceGeneration != c.finalFence.FenceGeneration) {
		c.violate(ViolationNotConverged, "", fmt.Sprintf("%s, outside the final fence (generation %d)", c.final, c.finalFence.FenceGeneration))
	}
}

func writer(e entry) string {
	switch {
	case e.read:
		return "a read (the write that made it has no answer in the record)"
	case e.op != "":
		return e.op
	case e.byGW:
		return "the reconciler"
	}
	return "a client other than the gateway"
}

func stateOf(s State, exists bool) State {
	if !exists {
		return State{}
	}
	return s
}

func sub(s string) string {
	if s == "" {
		return ""
	}
	return " of " + s
}

// fenceAt returns the fence's last version before revision rv.
func fenceAt(fences []fenceVersion, rv uint64) (fenceVersion, bool) {
	i, _ := slices.BinarySearchFunc(fences, rv, func(f fenceVersion, rv uint64) int { return cmp.Compare(f.rv, rv) })
	if i == 0 {
		return fenceVersion{}, false
	}
	return fences[i-1], true
}
