package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	stdlog "log"
	"net"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kubewire/kubewire/driver/reconciler"
)

// serve serves h on -listen, with rec reconciling beside it, until ctx
// ends (SIGTERM or SIGINT) or the server, the reconciler or the
// certificate's watch stops on its own; then it shuts down, and returns
// run's exit code.
func serve(ctx context.Context, c config, h http.Handler, rec *reconciler.Reconciler, log logr.Logger, stderr io.Writer) int {
	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		fmt.Fprintf(stderr, "gateway: %v\n", err)
		return 1
	}
	// ctx ends on SIGTERM or SIGINT, or when the reconciler stops on its
	// own; either way the gateway shuts down.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Requests' contexts end only when the gateway cuts them off, not
	// on SIGTERM, which Shutdown lets them finish.
	base, cutOff := context.WithCancel(context.WithoutCancel(ctx))
	defer cutOff()
	srv := newServer(c, h, base, stderr)
	certErr := make(chan error, 1)
	if c.tlsCert != "" {
		cw, watched, err := watchCert(ctx, cancel, c, log, certErr)
		if err != nil {
			_ = ln.Close()
			fmt.Fprintf(stderr, "gateway: -tls-cert-file %q, -tls-key-file %q: %v\n", c.tlsCert, c.tlsKey, err)
			return 2
		}
		defer func() {
			cancel()
			<-watched
		}()
		srv.TLSConfig = &tls.Config{GetCertificate: cw.GetCertificate, MinVersion: tls.VersionTLS12}
		ln = tls.NewListener(ln, srv.TLSConfig)
	}
	// The reconciler starts last, once nothing can fail before the server
	// runs, so that every error path above returns with nothing running.
	// It has a context of its own, ended once the HTTP server has shut
	// down: the gateway keeps reconciling while it answers what it
	// accepted, and closes the driver last.
	recCtx, stopRec := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRec()
	reconciled := startReconciler(recCtx, rec, log, cancel)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	// The address as bound: with port 0, the one the system chose.
	log.Info("serving", "addr", ln.Addr().String(), "namespaces", c.namespaces, "tls", c.tlsCert != "", "authenticate", c.authenticate)
	code := 0
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-served:
	}
	// Stop accepting, answer what was accepted, then stop the reconciler
	// and (deferred) the driver: main exits as soon as run returns.
	if !shutdown(srv, c.grace, cutOff, log, stderr) {
		code = 1
	}
	if serveErr == nil {
		serveErr = <-served
	}
	select {
	case err := <-certErr:
		fmt.Fprintf(stderr, "gateway: watching -tls-cert-file %q: %v\n", c.tlsCert, err)
		code = 1
	default:
	}
	if !errors.Is(serveErr, http.ErrServerClosed) {
		fmt.Fprintf(stderr, "gateway: %v\n", serveErr)
		code = 1
	}
	stopRec()
	if err := <-reconciled; !errors.Is(err, context.Canceled) {
		fmt.Fprintf(stderr, "gateway: reconciler: %v\n", err)
		code = 1
	}
	return code
}

// newServer returns the HTTP server of h with c's timeouts, whose
// requests' contexts derive from base.
func newServer(c config, h http.Handler, base context.Context, stderr io.Writer) *http.Server {
	return &http.Server{
		Handler:           withTimeout(h, c.requestTimeout),
		ReadHeaderTimeout: min(c.readTimeout, 10*time.Second),
		ReadTimeout:       c.readTimeout,
		WriteTimeout:      c.writeTimeout,
		IdleTimeout:       c.idleTimeout,
		// net/http's own lines (a failed TLS handshake) through the
		// same redaction as the gateway's.
		ErrorLog:    stdlog.New(stderr, "gateway: http: ", 0),
		BaseContext: func(net.Listener) context.Context { return base },
	}
}

// watchCert loads -tls-cert-file and -tls-key-file and watches them until
// ctx ends; watched is closed once the watch has stopped. A watch that
// fails sends its error on certErr and calls cancel, which shuts the
// gateway down.
func watchCert(ctx context.Context, cancel context.CancelFunc, c config, log logr.Logger, certErr chan<- error) (_ *certwatcher.CertWatcher, watched <-chan struct{}, _ error) {
	// Reloaded when the files change (fsnotify, and a poll every
	// 10s), so that a rotated certificate is served without a restart.
	cw, err := certwatcher.New(c.tlsCert, c.tlsKey)
	if err != nil {
		return nil, nil, err
	}
	crlog.SetLogger(log)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := cw.Start(ctx); err != nil && ctx.Err() == nil {
			// A certificate no longer watched would be served until
			// it expires: stop, as controller-runtime's manager does.
			certErr <- err
			cancel()
		}
	}()
	return cw, done, nil
}

// startReconciler runs rec until ctx ends, and returns the channel that
// gets what Run returned. A reconciler that stops on its own, before ctx
// ends, is logged and calls stop, which shuts the gateway down.
func startReconciler(ctx context.Context, rec *reconciler.Reconciler, log logr.Logger, stop context.CancelFunc) <-chan error {
	reconciled := make(chan error, 1)
	go func() {
		err := rec.Run(ctx)
		if ctx.Err() == nil {
			log.Error(err, "reconciler stopped")
			stop()
		}
		reconciled <- err
	}()
	return reconciled
}

// shutdown stops srv accepting connections and waits up to grace for the
// requests it accepted to be answered. Past grace it cuts them off, with
// cutOff, says so on stderr and returns false.
func shutdown(srv *http.Server, grace time.Duration, cutOff context.CancelFunc, log logr.Logger, stderr io.Writer) bool {
	log.Info("shutting down", "grace", grace.String())
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	err := srv.Shutdown(ctx)
	cancel()
	if err != nil {
		// Their callers get no answer: not a success the gateway could
		// not confirm.
		_ = srv.Close()
		cutOff()
		fmt.Fprintf(stderr, "gateway: shutdown: -shutdown-grace %v ran out; cut off the requests still in flight, unanswered\n", grace)
		return false
	}
	return true
}

// withTimeout gives each request's context a deadline d away, which ends
// the driver's calls for it: an operation that runs out of time is
// answered 503 (kind unavailable) before -write-timeout cuts the
// connection.
func withTimeout(h http.Handler, d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), d)
		defer cancel()
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}
