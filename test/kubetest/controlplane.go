package kubetest

// The launcher below does what controller-runtime's envtest (v0.25.2,
// pkg/internal/testing/controlplane) does to run kube-apiserver and etcd, with
// the standard library alone: kubetest's own module depends on client-go
// only.

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// startTimeoutEnv overrides the 60s that bound a whole start, retries
// included, and a restart: envtest's variable, for a machine slower still.
const startTimeoutEnv = "KUBEBUILDER_CONTROLPLANE_START_TIMEOUT"

// startTimeout is 60s, or a positive duration in startTimeoutEnv.
func startTimeout() (time.Duration, error) {
	v := os.Getenv(startTimeoutEnv)
	if v == "" {
		return 60 * time.Second, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s=%q: want a positive duration such as 2m", startTimeoutEnv, v)
	}
	return d, nil
}

const (
	// stopTimeout is envtest's default grace between SIGTERM and SIGKILL.
	stopTimeout = 20 * time.Second
	// pollInterval is envtest's default health-check interval.
	pollInterval = 100 * time.Millisecond
	// startAttempts: envtest retries a failed start (5 times), since a free
	// port picked by closing a listener can be taken before the process
	// binds it. Only that is retried: a bad flag fails again.
	startAttempts = 3
	// tailLines of a process's output go into a start error.
	tailLines = 20
)

// controlPlaneOptions configure startControlPlane.
type controlPlaneOptions struct {
	BinDir string            // holds kube-apiserver and etcd
	Args   map[string]string // kube-apiserver flags by name without dashes, set over the defaults
	Output io.Writer         // receives both processes' output; nil discards it
	// Replicas of kube-apiserver; 0 is 1. Over 1, a balancer configured by
	// Balancer fronts them.
	Replicas int
	Balancer balancerConfig
}

// controlPlane is a running etcd and kube-apiserver. Its methods are safe
// for concurrent use.
type controlPlane struct {
	dir       string // everything the plane writes; removed by stop
	binDir    string
	etcdURL   string // etcd's client URL, kept across API server restarts
	servingCA *authority
	clientCA  *authority
	probe     *http.Client // the admin: envtest polls anonymously, which Args of anonymous-auth=false would blind
	out       io.Writer
	replicas  []*replica // one, or those lb fronts
	lb        *balancer  // nil with one replica

	mu      sync.Mutex
	etcd    *process
	stopped bool
}

// replica is one kube-apiserver.
type replica struct {
	index int
	name  string   // in errors: kube-apiserver, or kube-apiserver replica 1
	port  string   // its secure port, kept across restarts
	args  []string // kept across restarts
	api   *process // nil while stopped; guarded by controlPlane.mu
}

func (r *replica) host() string { return "https://" + net.JoinHostPort("127.0.0.1", r.port) }

// startControlPlane starts etcd then kube-apiserver in a fresh temporary
// directory and returns once the API server is ready. On failure it leaves
// nothing running and nothing on disk.
func startControlPlane(o controlPlaneOptions) (_ *controlPlane, err error) {
	if o.BinDir == "" {
		return nil, errors.New("controlPlaneOptions.BinDir is empty")
	}
	dir, err := os.MkdirTemp("", "kubetest-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	out := o.Output
	if out == nil {
		out = io.Discard
	}
	c := &controlPlane{dir: dir, binDir: o.BinDir, out: &sharedOutput{w: out}}
	certDir := filepath.Join(dir, "certs")
	if err := c.writeCerts(certDir); err != nil {
		return nil, fmt.Errorf("writing the control plane's certificates: %w", err)
	}
	if c.probe, err = c.client("admin", "system:masters"); err != nil {
		return nil, err
	}
	c.replicas = []*replica{{name: "kube-apiserver"}}
	if o.Replicas > 1 {
		c.replicas = make([]*replica, o.Replicas)
		for i := range c.replicas {
			c.replicas[i] = &replica{index: i, name: fmt.Sprintf("kube-apiserver replica %d", i)}
		}
		// Any authenticated user may read /readyz; this one's checks are
		// told apart in the audit log.
		var check *http.Client
		if check, err = c.client("kubetest-load-balancer"); err != nil {
			return nil, err
		}
		// Before the replicas start: their service-account issuer is its
		// address.
		if c.lb, err = newBalancer(o.Balancer, check); err != nil {
			return nil, fmt.Errorf("starting the load balancer: %w", err)
		}
		defer func() {
			if err != nil {
				_ = c.lb.close()
			}
		}()
	}

	timeout, err := startTimeout()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var errs []error
	for attempt := 1; ; attempt++ {
		err := c.launch(ctx, certDir, o.Args)
		if err == nil {
			return c, nil
		}
		errs = append(errs, fmt.Errorf("attempt %d: %w", attempt, err))
		// Only an exit on a port taken meanwhile is worth another try; a
		// timeout, a bad flag or a bad binary would fail again.
		var se *startError
		if attempt == startAttempts || !errors.As(err, &se) || !se.exited || ctx.Err() != nil ||
			!strings.Contains(se.output, "address already in use") {
			return nil, fmt.Errorf("starting etcd and kube-apiserver from %s: %w", o.BinDir, errors.Join(errs...))
		}
	}
}

// launch starts etcd and the kube-apiservers on fresh ports; if any fails
// it stops them all.
func (c *controlPlane) launch(ctx context.Context, certDir string, extra map[string]string) error {
	ports, err := freePorts(2 + len(c.replicas))
	if err != nil {
		return err
	}
	etcdURL := "http://" + net.JoinHostPort("127.0.0.1", ports[0])
	etcdDir := filepath.Join(c.dir, "etcd")
	// A failed attempt's half-made member would be reused.
	if err := os.RemoveAll(etcdDir); err != nil {
		return err
	}
	// etcd.go defaultArgs.
	etcd, err := c.startProcess("etcd", flags(map[string]string{
		"advertise-client-urls": etcdURL,
		"data-dir":              etcdDir,
		"listen-client-urls":    etcdURL,
		"listen-peer-urls":      "http://" + net.JoinHostPort("127.0.0.1", ports[1]),
		// envtest sets it when --help lists it (etcd >= 3.5); every etcd
		// of a Kubernetes we support has it.
		"unsafe-no-fsync": "true",
	}, nil))
	if err != nil {
		return err
	}
	etcdProbe := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	if err := waitReady(ctx, etcd, func(ctx context.Context) error {
		return get(ctx, etcdProbe, etcdURL+"/health")
	}); err != nil {
		return errors.Join(err, etcd.stop())
	}

	c.etcdURL = etcdURL
	if c.lb != nil {
		extra = c.haArgs(extra)
	}
	// All start at once and are then waited for, as the replicas of a
	// cluster's control plane come up together.
	apis := make([]*process, len(c.replicas))
	stopAll := func() error {
		errs := make([]error, 0, len(apis)+1)
		for _, api := range apis {
			errs = append(errs, api.stop())
		}
		return errors.Join(append(errs, etcd.stop())...)
	}
	for i, r := range c.replicas {
		r.port = ports[2+i]
		r.args = apiServerArgs(certDir, r.port, etcdURL, extra)
		if apis[i], err = c.startProcess("kube-apiserver", r.args); err != nil {
			return errors.Join(err, stopAll())
		}
		apis[i].name = r.name
	}
	for i, r := range c.replicas {
		if err := c.waitAPIServer(ctx, apis[i], r.host()); err != nil {
			return errors.Join(err, stopAll())
		}
	}
	c.etcd = etcd
	for i, r := range c.replicas {
		r.api = apis[i]
	}
	if c.lb != nil {
		addrs := make([]string, len(c.replicas))
		for i, r := range c.replicas {
			addrs[i] = net.JoinHostPort("127.0.0.1", r.port)
		}
		c.lb.start(addrs)
	}
	return nil
}

// haArgs are the flags every replica of an HA control plane gets, overlaid
// by extra: one service-account issuer, the balancer's address, so that a
// token one replica issued is valid at the others; a shutdown that lets
// the balancer mark a stopping replica out before it stops serving, and
// then answers new requests 429 with Retry-After rather than refusing
// them.
func (c *controlPlane) haArgs(extra map[string]string) map[string]string {
	m := map[string]string{
		"service-account-issuer":    c.host() + "/",
		"shutdown-delay-duration":   c.lb.cfg.shutdownDelay().String(),
		"shutdown-send-retry-after": "true",
	}
	maps.Copy(m, extra)
	return m
}

// apiServerArgs are envtest's kube-apiserver flags (apiserver.go
// defaultArgs, auth.go Configure), overlaid by extra.
func apiServerArgs(certDir, port, etcdURL string, extra map[string]string) []string {
	return flags(map[string]string{
		"allow-privileged":   "true",
		"authorization-mode": "RBAC",
		"bind-address":       "127.0.0.1",
		// kube-apiserver finds apiserver.crt and apiserver.key here.
		"cert-dir":       certDir,
		"client-ca-file": filepath.Join(certDir, "client-cert-auth-ca.crt"),
		// The controller that would create default service accounts does
		// not run; with the plugin on, creating a pod would fail.
		"disable-admission-plugins":        "ServiceAccount",
		"etcd-servers":                     etcdURL,
		"secure-port":                      port,
		"service-account-issuer":           "https://" + net.JoinHostPort("127.0.0.1", port) + "/",
		"service-account-key-file":         filepath.Join(certDir, "sa-signer.crt"),
		"service-account-signing-key-file": filepath.Join(certDir, "sa-signer.key"),
		"service-cluster-ip-range":         "10.0.0.0/24",
	}, extra)
}

// flags renders defaults overlaid by extra, sorted as envtest sorts them.
func flags(defaults, extra map[string]string) []string {
	m := maps.Clone(defaults)
	maps.Copy(m, extra)
	args := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		args = append(args, "--"+k+"="+m[k])
	}
	return args
}

// waitAPIServer waits for /readyz (envtest's /healthz is the deprecated,
// weaker check), then for the default namespace, as envtest does: it is
// created only after the server is ready, and tests use it.
func (c *controlPlane) waitAPIServer(ctx context.Context, api *process, host string) error {
	return waitReady(ctx, api, func(ctx context.Context) error {
		if err := get(ctx, c.probe, host+"/readyz"); err != nil {
			return err
		}
		return get(ctx, c.probe, host+"/api/v1/namespaces/default")
	})
}

// host is the API server's URL: the load balancer's in an HA control
// plane. Its serving certificate, for 127.0.0.1 and any port, is valid
// for both.
func (c *controlPlane) host() string {
	if c.lb != nil {
		return "https://" + c.lb.addr()
	}
	return c.replicas[0].host()
}

// caPEM is the CA that signed the API server's serving certificate.
func (c *controlPlane) caPEM() []byte { return slices.Clone(c.servingCA.certPEM) }

// addUser returns a client certificate, signed by the API server's client
// CA, that authenticates as name in groups.
func (c *controlPlane) addUser(name string, groups ...string) (certPEM, keyPEM []byte, err error) {
	certPEM, keyPEM, err = c.clientCA.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: name, Organization: groups},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return nil, nil, fmt.Errorf("issuing a client certificate for %s: %w", name, err)
	}
	return certPEM, keyPEM, nil
}

// client is an HTTP client of the API server as name in groups.
func (c *controlPlane) client(name string, groups ...string) (*http.Client, error) {
	certPEM, keyPEM, err := c.addUser(name, groups...)
	if err != nil {
		return nil, err
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	roots.AddCert(c.servingCA.cert)
	return &http.Client{
		Timeout: 5 * time.Second,
		// No pooled connections: none outlives a poll to be reported by
		// goleak, and none from a stopped server is reused.
		Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}},
			DisableKeepAlives: true,
		},
	}, nil
}

// restartAPIServer stops kube-apiserver and starts it again on the same
// port, etcd, certificates and flags, as an upgrade or a crash-and-restart
// does. It returns once the new process is ready. An HA control plane
// restarts its replicas in turn, gracefully.
func (c *controlPlane) restartAPIServer() error {
	if c.lb != nil {
		return c.rollingRestart(Graceful)
	}
	return c.restartReplica(0, Graceful)
}

// rollingRestart restarts each replica in turn as how says.
func (c *controlPlane) rollingRestart(how Stop) error {
	for i := range c.replicas {
		if err := c.restartReplica(i, how); err != nil {
			return fmt.Errorf("rolling restart (%v): %w", how, err)
		}
	}
	return nil
}

// restartReplica stops replica i as how says and starts it again.
func (c *controlPlane) restartReplica(i int, how Stop) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, err := c.replica("restarting", i)
	if err != nil {
		return err
	}
	// A stop that timed out has killed the process: start it all the same.
	var errs []error
	if err := r.api.halt(how); err != nil {
		errs = append(errs, fmt.Errorf("stopping %s: %w", r.name, err))
	}
	r.api = nil
	if err := c.startLocked(r); err != nil {
		errs = append(errs, fmt.Errorf("starting %s again: %w", r.name, err))
	}
	return errors.Join(errs...)
}

// stopReplica stops replica i as how says and leaves it stopped.
func (c *controlPlane) stopReplica(i int, how Stop) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, err := c.replica("stopping", i)
	if err != nil {
		return err
	}
	if r.api == nil {
		return fmt.Errorf("stopping %s: it is stopped already", r.name)
	}
	err = r.api.halt(how)
	r.api = nil
	if err != nil {
		return fmt.Errorf("stopping %s: %w", r.name, err)
	}
	return nil
}

// startReplica starts the stopped replica i.
func (c *controlPlane) startReplica(i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, err := c.replica("starting", i)
	if err != nil {
		return err
	}
	if r.api != nil {
		return fmt.Errorf("starting %s: it is running; stop it first", r.name)
	}
	if err := c.startLocked(r); err != nil {
		return fmt.Errorf("starting %s: %w", r.name, err)
	}
	return nil
}

// replica is replica i of a running control plane; doing is what the
// caller's error says it was doing.
func (c *controlPlane) replica(doing string, i int) (*replica, error) {
	if c.stopped {
		return nil, fmt.Errorf("%s kube-apiserver: the control plane is stopped", doing)
	}
	if i < 0 || i >= len(c.replicas) {
		return nil, fmt.Errorf("%s kube-apiserver replica %d: there are %d (Options.Replicas), from 0", doing, i, len(c.replicas))
	}
	return c.replicas[i], nil
}

// startLocked starts r, stopped, and waits until it is ready and the
// balancer, if any, has marked it in.
func (c *controlPlane) startLocked(r *replica) error {
	timeout, err := startTimeout()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	api, err := c.startProcess("kube-apiserver", r.args)
	if err != nil {
		return err
	}
	api.name = r.name
	if err := c.waitAPIServer(ctx, api, r.host()); err != nil {
		return errors.Join(err, api.stop())
	}
	r.api = api
	if c.lb == nil {
		return nil
	}
	if err := c.lb.waitIn(ctx, r.index); err != nil {
		return fmt.Errorf("ready, but the load balancer has not marked it in (%d passed checks in a row needed): %w", c.lb.cfg.healthy, err)
	}
	return nil
}

// stop stops the load balancer, if any, kube-apiserver, then etcd, waits
// for them to exit and removes the temporary directory. A second call does
// nothing.
func (c *controlPlane) stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return nil
	}
	c.stopped = true
	var errs []error
	if c.lb != nil {
		errs = append(errs, c.lb.close())
	}
	for _, r := range c.replicas {
		errs = append(errs, r.api.crashed())
	}
	// At once: each replica of an HA control plane waits out its shutdown
	// delay.
	stopped := make([]error, len(c.replicas))
	var wg sync.WaitGroup
	for i, r := range c.replicas {
		wg.Go(func() { stopped[i] = r.api.stop() })
	}
	wg.Wait()
	errs = append(errs, stopped...)
	return errors.Join(append(errs, c.etcd.crashed(), c.etcd.stop(), os.RemoveAll(c.dir))...)
}

// writeCerts writes the files envtest writes to the API server's cert dir
// (apiserver.go populateAPIServerCerts, auth.go Start): each role has a CA
// of its own.
func (c *controlPlane) writeCerts(dir string) error {
	var err error
	if c.servingCA, err = newAuthority("kubetest-serving-ca"); err != nil {
		return err
	}
	if c.clientCA, err = newAuthority("kubetest-client-ca"); err != nil {
		return err
	}
	sa, err := newAuthority("kubetest-service-account-signer")
	if err != nil {
		return err
	}
	servingCert, servingKey, err := c.servingCA.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "localhost"},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	for name, data := range map[string][]byte{
		"apiserver.crt": servingCert,
		"apiserver.key": servingKey,
		// kube-apiserver takes a certificate for a public key, as envtest
		// gives it.
		"sa-signer.crt":           sa.certPEM,
		"sa-signer.key":           sa.keyPEM,
		"client-cert-auth-ca.crt": c.clientCA.certPEM,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// authority is a CA of ECDSA P-256 keys, as envtest's TinyCA is.
type authority struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
	keyPEM  []byte
}

func newAuthority(name string) (*authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name, Organization: []string{"kubetest"}},
		NotBefore:             now.UTC(),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour).UTC(),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return &authority{cert: cert, key: key, certPEM: encodeCert(der), keyPEM: keyPEM}, nil
}

// issue signs a fresh key for tmpl's subject, names and usages.
func (a *authority) issue(tmpl *x509.Certificate) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	if tmpl.SerialNumber, err = newSerial(); err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl.NotBefore = now.UTC()
	// envtest's week: long enough for any test run.
	tmpl.NotAfter = now.Add(7 * 24 * time.Hour).UTC()
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, key.Public(), a.key)
	if err != nil {
		return nil, nil, err
	}
	if keyPEM, err = encodeKey(key); err != nil {
		return nil, nil, err
	}
	return encodeCert(der), keyPEM, nil
}

// newSerial is random, so that certificates issued concurrently by one
// authority need no counter.
func newSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

func encodeCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// freePorts picks n distinct free loopback ports, holding all listeners
// open at once so the kernel cannot hand out one port twice.
func freePorts(n int) ([]string, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	ports := make([]string, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("picking a free port: %w", err)
		}
		ls = append(ls, l)
		_, ports[i], _ = net.SplitHostPort(l.Addr().String())
	}
	return ports, nil
}

// process is a running etcd or kube-apiserver.
type process struct {
	name string
	cmd  *exec.Cmd
	tail *tailWriter
	done chan struct{} // closed once the process has exited and its output is copied
	err  error         // from Wait; read only after done
}

func (c *controlPlane) startProcess(name string, args []string) (*process, error) {
	p := &process{name: name, tail: &tailWriter{}, done: make(chan struct{})}
	p.cmd = exec.Command(filepath.Join(c.binDir, name), args...)
	// One writer for both streams: exec then copies them through one pipe,
	// in order.
	w := io.MultiWriter(c.out, p.tail)
	p.cmd.Stdout, p.cmd.Stderr = w, w
	p.cmd.SysProcAttr = sysProcAttr()
	started := make(chan error, 1)
	go func() {
		// Linux sends Pdeathsig when the thread that started the child
		// exits, not the process (golang/go#27505); locked, this thread
		// lives until the child is gone.
		runtime.LockOSThread()
		if err := p.cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	return p, nil
}

// crashed reports a process that exited without being stopped.
func (p *process) crashed() error {
	if p == nil {
		return nil
	}
	select {
	case <-p.done:
		return fmt.Errorf("%s had exited before stop (%v); its last output:\n%s", p.name, p.exitErr(), p.tail)
	default:
		return nil
	}
}

// stop sends SIGTERM, then SIGKILL after stopTimeout, and waits for the
// exit.
func (p *process) stop() error {
	if p == nil {
		return nil
	}
	select {
	case <-p.done:
		return nil
	default:
	}
	// An error means it has just exited, or (Windows) no SIGTERM.
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		_ = p.cmd.Process.Kill()
	}
	timer := time.NewTimer(stopTimeout)
	defer timer.Stop()
	select {
	case <-p.done:
		return nil
	case <-timer.C:
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	return fmt.Errorf("%s did not exit within %v of SIGTERM, so was killed", p.name, stopTimeout)
}

// halt stops p as how says and waits for the exit.
func (p *process) halt(how Stop) error {
	if how == Graceful || p == nil {
		return p.stop()
	}
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	return nil
}

func (p *process) exitErr() error {
	if p.err == nil {
		return errors.New("exit status 0")
	}
	return p.err
}

// waitReady polls ready until it succeeds, p exits or ctx ends.
func waitReady(ctx context.Context, p *process, ready func(context.Context) error) error {
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		err := ready(ctx)
		select {
		case <-p.done:
			// Exited: a check that passed reached another test binary's
			// process, which took the port between freePorts and the bind.
			return &startError{name: p.name, exited: true, err: p.exitErr(), output: p.tail.String()}
		default:
		}
		if err == nil {
			return nil
		}
		select {
		case <-p.done:
			return &startError{name: p.name, exited: true, err: p.exitErr(), output: p.tail.String()}
		case <-ctx.Done():
			return &startError{name: p.name, err: fmt.Errorf("%w (last check: %w)", ctx.Err(), err), output: p.tail.String()}
		case <-tick.C:
		}
	}
}

// get is nil if GET url answers 200.
func get(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, bytes.TrimSpace(body))
	}
	return nil
}

// startError is a process that did not become ready, with its last output.
type startError struct {
	name   string
	exited bool // rather than timed out
	err    error
	output string
}

func (e *startError) Error() string {
	what := "was not ready in time"
	if e.exited {
		what = "exited before it was ready"
	}
	return fmt.Sprintf("%s %s: %v; its last output:\n%s", e.name, what, e.err, e.output)
}

func (e *startError) Unwrap() error { return e.err }

// sharedOutput serialises both processes' writes to the caller's writer and
// hides its errors: a failed write would stop exec's copying, and the child
// would block on a full pipe.
type sharedOutput struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *sharedOutput) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, _ = s.w.Write(b)
	return len(b), nil
}

// tailWriter keeps the end of a process's output for its errors.
type tailWriter struct {
	mu  sync.Mutex
	buf []byte
}

const tailBytes = 16 << 10

func (t *tailWriter) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if over := len(t.buf) - tailBytes; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(b), nil
}

// String is the last tailLines lines.
func (t *tailWriter) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := strings.Split(strings.TrimRight(string(t.buf), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-tailLines):], "\n")
}
