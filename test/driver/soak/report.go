package soak

import (
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
)

// Table is the report as a short table.
func (r *Report) Table() string {
	var b strings.Builder
	res := r.Result
	fmt.Fprintf(&b, "scenario %s, %d kube-apiserver(s)", r.Scenario, r.Replicas)
	if r.GoawayChance > 0 {
		fmt.Fprintf(&b, ", GOAWAY chance %g", r.GoawayChance)
	}
	if bs := r.Balancer; bs != nil {
		conns := make([]string, len(bs.Replicas))
		for i, rs := range bs.Replicas {
			conns[i] = fmt.Sprintf("%d (%d reset)", rs.Conns, rs.DialErrors)
		}
		fmt.Fprintf(&b, ", connections through the load balancer per replica %s, %d refused", strings.Join(conns, " / "), bs.Refused)
	}
	fmt.Fprintf(&b, "\nseed %d, %v, %d clients x %d sandboxes, fence changes %g/min, LB idle %v, stalls of %v, wall %v\n",
		r.Seed, r.Duration, r.Clients, r.Sandboxes, r.FenceChanges, r.LBIdle, r.StallFor, r.Wall.Round(100_000_000))
	var faults []string
	for _, name := range faultNames {
		switch {
		case name == FaultRestart && r.Restart, r.Armed[name] > 0 && !slices.Contains(rateFaults, name):
			faults = append(faults, fmt.Sprintf("%s %d", name, r.Acted[name]))
		case slices.Contains(rateFaults, name):
			faults = append(faults, fmt.Sprintf("%s %g/min: %d armed, %d acted", name, r.Rates[name], r.Armed[name], r.Acted[name]))
		}
	}
	fmt.Fprintf(&b, "faults: %s\n", strings.Join(faults, "; "))
	var ops []string
	for _, k := range []Kind{Create, Stop, Start, Delete, Get, Fence} {
		m := res.ByKind[k]
		ops = append(ops, fmt.Sprintf("%s %d/%d/%d", k, m[OK], m[Fail], m[Unknown]))
	}
	fmt.Fprintf(&b, "operations (ok/fail/unknown): %d: %s\n", res.Ops, strings.Join(ops, ", "))
	fmt.Fprintf(&b, "unknown writes in the audit log: %d answered 2xx, %d reached the API server without success, %d never reached it\n",
		res.Unknown.Applied, res.Unknown.Reached, res.Unknown.NotReached)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	row := func(what, got, want string) { fmt.Fprintf(tw, "%s\t%s\t%s\n", what, got, want) }
	row("check", "result", "must be")
	row("duplicated non-idempotent writes", fmt.Sprint(res.DuplicateWrites), "0")
	row("  of which creates", fmt.Sprint(res.DuplicateCreates), "0")
	row("idempotent re-executions (applied)", fmt.Sprintf("%d (%d)", res.IdempotentReexecutions, res.IdempotentReapplied), "reported")
	row("lost acknowledged operations", fmt.Sprint(res.LostAcknowledged), "0")
	row("final state disagreements", fmt.Sprintf("%d of %d sandboxes", res.StateDisagreements, res.Sandboxes), "0")
	a := res.Amplification
	row("API requests per operation p50/p99/max", fmt.Sprintf("%g / %g / %g", a.P50, a.P99, a.Max), "")
	row("latency without faults p50/p99", fmt.Sprintf("%.1f / %.1f ms (%d ops)", res.LatencyClean.P50, res.LatencyClean.P99, res.LatencyClean.N), "")
	row("latency under faults p50/p99", fmt.Sprintf("%.1f / %.1f ms (%d ops)", res.LatencyFaulted.P50, res.LatencyFaulted.P99, res.LatencyFaulted.N), "")
	row("gateway background requests", background(res.Background), "")
	row("gateway goroutines start/end", fmt.Sprintf("%d/%d", r.Start.Goroutines, r.End.Goroutines), fmt.Sprintf("+%d at most", r.Tolerance.Goroutines))
	row("gateway open fds start/end", fmt.Sprintf("%d/%d", r.Start.FDs, r.End.FDs), fmt.Sprintf("+%d at most", r.Tolerance.FDs))
	row("gateway heap in use start/end", fmt.Sprintf("%s/%s", mib(r.Start.HeapBytes), mib(r.End.HeapBytes)), "+"+mib(r.Tolerance.HeapBytes)+" at most")
	_ = tw.Flush()
	failuresTable(&b, res.FailuresByCause)
	for _, v := range res.Violations {
		fmt.Fprintf(&b, "VIOLATION %s %s %s: %s\n", v.Kind, v.Name, v.Op, v.Detail)
	}
	for _, l := range r.Leaks {
		fmt.Fprintf(&b, "LEAK %s\n", l)
	}
	for _, e := range r.Errors {
		fmt.Fprintf(&b, "ERROR %s\n", e)
	}
	return b.String()
}

func background(m map[string]int) string {
	var parts []string
	for _, verb := range []string{"list", "watch", "get", "patch", "create", "update", "delete"} {
		if m[verb] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", verb, m[verb]))
		}
	}
	return strings.Join(parts, ", ")
}

// failuresTable writes the operations that did not succeed by cause, one
// row each, and by the fault window they overlap, one column each.
func failuresTable(b *strings.Builder, counts []CauseCount) {
	windows := windowNames(counts)
	total := 0
	for _, c := range counts {
		total += c.Total
	}
	fmt.Fprintf(b, "operations that did not succeed, by cause and by the fault window they overlap: %d\n", total)
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "cause\ttotal\t%s\t\n", strings.Join(windows, "\t"))
	for _, c := range counts {
		cells := make([]string, len(windows))
		for i, w := range windows {
			cells[i] = fmt.Sprint(c.ByWindow[w])
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t\n", c.Cause, c.Total, strings.Join(cells, "\t"))
	}
	_ = tw.Flush()
}
