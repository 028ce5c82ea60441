package kubetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// CompactEtcd compacts etcd's history up to its current revision, as
// kube-apiserver's compactor does every five minutes
// (--etcd-compaction-interval), and waits until the compaction is done
// (physical). It returns the revision compacted to; a store already
// compacted there is not an error.
//
// A benchmark calls it off the clock before each timed run, so that every
// run starts from the same compacted store and the API server's own
// compaction, which then finds nothing left to do, never lands inside one
// run.
//
// It speaks etcd's JSON gateway (/v3/kv/...), which serves on the client
// URL of every etcd a supported Kubernetes ships, so the rig needs no
// etcd client module.
func (e *Env) CompactEtcd(ctx context.Context) (int64, error) {
	if e.err != nil {
		return 0, e.err
	}
	if e.cp == nil {
		return 0, errors.New("kubetest: CompactEtcd: no control plane: KUBEBUILDER_ASSETS is not set")
	}
	// No connection outlives the call, for goleak's sake.
	client := &http.Client{Timeout: 5 * time.Minute, Transport: &http.Transport{DisableKeepAlives: true}}
	var head struct {
		Header struct {
			Revision string `json:"revision"`
		} `json:"header"`
	}
	// A range over one key: its answer's header holds the store's revision.
	if err := etcdCall(ctx, client, e.cp.etcdURL+"/v3/kv/range", map[string]any{"key": "AA==", "limit": 1}, &head); err != nil {
		return 0, err
	}
	rev, err := strconv.ParseInt(head.Header.Revision, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("kubetest: etcd's revision %q: %w", head.Header.Revision, err)
	}
	if err := compactTo(ctx, client, e.cp.etcdURL, rev); err != nil {
		return 0, err
	}
	return rev, nil
}

// compactTo compacts etcd at url up to rev and waits for it; a store
// already compacted at or past rev is not an error.
func compactTo(ctx context.Context, client *http.Client, url string, rev int64) error {
	err := etcdCall(ctx, client, url+"/v3/kv/compaction", map[string]any{"revision": strconv.FormatInt(rev, 10), "physical": true}, nil)
	if err != nil && strings.Contains(err.Error(), "required revision has been compacted") {
		return nil
	}
	return err
}

// etcdCall POSTs in as JSON to url and decodes the answer into out, if not
// nil.
func etcdCall(ctx context.Context, client *http.Client, url string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("kubetest: etcd: %w", err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("kubetest: etcd: POST %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("kubetest: etcd: POST %s: %s: %s", url, resp.Status, bytes.TrimSpace(answer))
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(answer, out); err != nil {
		return fmt.Errorf("kubetest: etcd: POST %s: %w", url, err)
	}
	return nil
}
