package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/kubewire/kubewire/driver"
	"github.com/kubewire/kubewire/driver/drivermetrics"
	"github.com/kubewire/kubewire/metrics"
)

// sandbox is the JSON view of a driver.Sandbox.
type sandbox struct {
	Namespace       string `json:"namespace"`
	Name            string `json:"name"`
	UID             string `json:"uid"`
	Phase           string `json:"phase"`
	Reason          string `json:"reason,omitempty"`
	Message         string `json:"message,omitempty"`
	Running         bool   `json:"running"`
	FenceUID        string `json:"fenceUID,omitempty"`
	FenceGeneration int64  `json:"fenceGeneration,omitempty"`
}

func view(s driver.Sandbox) sandbox {
	return sandbox{
		Namespace: s.Namespace, Name: s.Name, UID: string(s.UID),
		Phase: string(s.Phase), Reason: s.Reason, Message: s.Message, Running: s.Running, FenceUID: string(s.FenceUID), FenceGeneration: s.FenceGeneration,
	}
}

// newRegistry returns the registry /metrics serves, with the stack's and
// the reconciler's metrics registered on it.
func newRegistry() (*prometheus.Registry, *metrics.Metrics, *drivermetrics.Metrics) {
	reg := prometheus.NewRegistry()
	m, rm := metrics.New(), drivermetrics.New()
	reg.MustRegister(m, rm, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg, m, rm
}

// newHandler serves the routes of d, and reg's metrics, to the callers g
// lets in (everyone if g is nil), and the health checks to everyone: ready
// reports whether the driver's caches have synced (nil: always). It logs
// each error answer's whole chain on log.
func newHandler(d *driver.Driver, reg prometheus.Gatherer, log logr.Logger, g *gate, ready func() bool) http.Handler {
	respond := func(w http.ResponseWriter, r *http.Request, code int, body any, err error) {
		if err != nil {
			fail(w, r, log, err)
			return
		}
		reply(w, code, body)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", g.authorizePath(promhttp.HandlerFor(reg, promhttp.HandlerOpts{})))
	one := func(f func(context.Context, string, string) (driver.Sandbox, error)) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			s, err := f(r.Context(), r.PathValue("ns"), r.PathValue("name"))
			respond(w, r, http.StatusOK, view(s), err)
		}
	}
	mux.Handle("GET /v1/namespaces/{ns}/sandboxes", g.authorize("list", func(w http.ResponseWriter, r *http.Request) {
		list, err := d.List(r.Context(), r.PathValue("ns"))
		out := make([]sandbox, 0, len(list))
		for _, s := range list {
			out = append(out, view(s))
		}
		respond(w, r, http.StatusOK, out, err)
	}))
	mux.Handle("POST /v1/namespaces/{ns}/sandboxes", g.authorize("create", func(w http.ResponseWriter, r *http.Request) {
		req, err := decodeCreate(r.PathValue("ns"), http.MaxBytesReader(w, r.Body, maxBody))
		if err != nil {
			respond(w, r, 0, nil, err)
			return
		}
		s, err := d.Create(r.Context(), r.PathValue("ns"), req.Name, req.PodTemplate)
		respond(w, r, http.StatusCreated, view(s), err)
	}))
	mux.Handle("GET /v1/namespaces/{ns}/sandboxes/{name}", g.authorize("get", one(d.Get)))
	mux.Handle("POST /v1/namespaces/{ns}/sandboxes/{name}/stop", g.authorize("stop", one(d.Stop)))
	mux.Handle("POST /v1/namespaces/{ns}/sandboxes/{name}/start", g.authorize("start", one(d.Start)))
	mux.Handle("DELETE /v1/namespaces/{ns}/sandboxes/{name}", g.authorize("delete", func(w http.ResponseWriter, r *http.Request) {
		err := d.Delete(r.Context(), r.PathValue("ns"), r.PathValue("name"))
		respond(w, r, http.StatusNoContent, nil, err)
	}))
	top := http.NewServeMux()
	// A kubelet's probes carry no token: the health checks answer anyone,
	// and say no more than whether the gateway serves (healthz, livez) or
	// is ready to (readyz).
	alive := func(w http.ResponseWriter, _ *http.Request) { health(w, true) }
	top.HandleFunc("GET /healthz", alive)
	top.HandleFunc("GET /livez", alive)
	top.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) { health(w, ready == nil || ready()) })
	top.Handle("/", checkPath(log, g.authenticate(mux)))
	return withRequestIDs(top)
}

// health answers a health check: 200 "ok", or 503 "not ready".
func health(w http.ResponseWriter, ok bool) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if !ok {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "not ready\n")
		return
	}
	_, _ = io.WriteString(w, "ok\n")
}

// checkPath answers 400 a request whose path names a namespace or a
// sandbox that cannot exist, before any review is sent for it: a namespace
// is a DNS label, and so is a sandbox's name. It reads the path as the
// routes do, segment by segment, each unescaped.
func checkPath(log logr.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rest, ok := strings.CutPrefix(r.URL.EscapedPath(), "/v1/namespaces/")
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		segs := strings.Split(rest, "/")
		fields := []struct{ field, value string }{{"namespace", segs[0]}}
		if len(segs) >= 3 && segs[1] == "sandboxes" {
			fields = append(fields, struct{ field, value string }{"sandbox name", segs[2]})
		}
		for _, f := range fields {
			v, err := url.PathUnescape(f.value)
			if err == nil {
				if errs := validation.IsDNS1123Label(v); len(errs) > 0 {
					err = errors.New(errs[0])
				}
			}
			if err != nil {
				msg := fmt.Sprintf("%s %s in the path is not a DNS label: %v", f.field, quoteValue(f.value), err)
				refuse(w, r, log, http.StatusBadRequest, kindInvalid, msg, errors.New(msg))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}
