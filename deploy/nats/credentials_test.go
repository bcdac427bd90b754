package nats_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/enginecmd"
	"github.com/abi-engine/engine/internal/natstest"
)

// writeFile writes a test file and returns its path.
func writeFile(t *testing.T, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// plainOptions is a single-account server for a credential kind.
func plainOptions(t *testing.T) *server.Options {
	return &server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true}
}

// engineUserPermissions are the engine user's permissions as deploy/nats
// writes them, for the JWTs the test mints.
func engineUserPermissions(t *testing.T) jwt.Permissions {
	t.Helper()
	for _, u := range natstest.DeployedOptions(t, "server.conf").Users {
		if u.Username == "engine_a" {
			var p jwt.Permissions
			p.Pub.Allow = jwt.StringList(u.Permissions.Publish.Allow)
			p.Sub.Allow = jwt.StringList(u.Permissions.Subscribe.Allow)
			return p
		}
	}
	t.Fatalf("deploy/nats has no engine_a")
	return jwt.Permissions{}
}

// credentialKind is one way the configuration authenticates: a server that
// takes it, the credentials block that passes and one that must fail.
type credentialKind struct {
	name      string
	server    func(t *testing.T) (*server.Options, string) // options, and the URL scheme
	good, bad func(t *testing.T) string
	// cause is what the refusal must name.
	cause string
}

// A serving engine with good credentials; then an engine with bad ones
// fails at start, exit code 1, naming the cause, and the lease still names
// the first.
func TestEveryCredentialKindConnectsAndABadOneFailsNamingTheCause(t *testing.T) {
	for _, k := range credentialKinds(t) {
		t.Run(k.name, func(t *testing.T) {
			opts, scheme := k.server(t)
			s := natstest.StartWith(t, opts)
			url := strings.Replace(s.ClientURL(), "nats://", scheme+"://", 1)
			good := startEngine(t, engineFile(t, url, k.good(t), "role: serve"))
			if good.Outcome() != domain.OutcomeServe {
				t.Fatalf("the engine with good credentials is %v", good.Outcome())
			}
			rec := good.Ownership().Record()

			var stderr bytes.Buffer
			code := enginecmd.Run([]string{"serve", "--config", engineFile(t, url, k.bad(t), "role: serve")}, &bytes.Buffer{}, &stderr, enginecmd.Options{})
			if code == 0 || !strings.Contains(strings.ToLower(stderr.String()), strings.ToLower(k.cause)) {
				t.Fatalf("an engine with bad credentials exits %d: %s\nwant a failure naming %q", code, stderr.String(), k.cause)
			}
			if now := good.Ownership().Record(); now.Holder != rec.Holder || good.Ownership().State() != domain.StateServing {
				t.Fatalf("the lease changed: %+v, was %+v", now.Holder, rec.Holder)
			}
		})
	}
}

func credentialKinds(t *testing.T) []credentialKind {
	password := func(pw string) func(*testing.T) string {
		return func(*testing.T) string { return fmt.Sprintf("{user: engine, password: %q}", pw) }
	}
	token := func(tok string) func(*testing.T) string {
		return func(*testing.T) string { return fmt.Sprintf("{token: %q}", tok) }
	}
	userKey, _ := nkeys.CreateUser()
	userPub, _ := userKey.PublicKey()
	userSeed, _ := userKey.Seed()
	otherKey, _ := nkeys.CreateUser()
	otherSeed, _ := otherKey.Seed()
	seedFile := func(seed []byte) func(*testing.T) string {
		return func(t *testing.T) string {
			return fmt.Sprintf("{nkey_seed_file: %q}", writeFile(t, "user.nk", seed))
		}
	}
	op := newOperator(t)
	perms := engineUserPermissions(t)
	ca, untrusted := newCA(t, "engine test CA"), newCA(t, "someone else's CA")
	serverCert, serverKey := ca.issue(t, "nats", true)
	tlsBlock := func(issuer *testCA) func(*testing.T) string {
		return func(t *testing.T) string {
			cert, key := issuer.issue(t, "engine", false)
			return fmt.Sprintf("{tls: {ca: %q, cert: %q, key: %q}}", ca.file, cert, key)
		}
	}
	return []credentialKind{
		{
			name: "UserPassword",
			server: func(t *testing.T) (*server.Options, string) {
				o := plainOptions(t)
				o.Username, o.Password = "engine", "right-password"
				return o, "nats"
			},
			good: password("right-password"), bad: password("wrong-password"), cause: `user "engine" and its password: nats: authorization violation`,
		},
		{
			name: "Token",
			server: func(t *testing.T) (*server.Options, string) {
				o := plainOptions(t)
				o.Authorization = "right-token"
				return o, "nats"
			},
			good: token("right-token"), bad: token("wrong-token"), cause: "nats.credentials.token: nats: authorization violation",
		},
		{
			name: "NkeySeed",
			server: func(t *testing.T) (*server.Options, string) {
				o := plainOptions(t)
				o.Nkeys = []*server.NkeyUser{{Nkey: userPub}}
				return o, "nats"
			},
			good: seedFile(userSeed), bad: seedFile(otherSeed), cause: "user.nk: nats: authorization violation",
		},
		{
			name:   "CredsFile",
			server: op.serverOptions,
			good: func(t *testing.T) string {
				return fmt.Sprintf("{creds_file: %q}", op.creds(t, perms, time.Now().Add(time.Hour)))
			},
			bad: func(t *testing.T) string {
				return fmt.Sprintf("{creds_file: %q}", op.creds(t, perms, time.Now().Add(-time.Minute)))
			},
			cause: `the user jwt of "engine_a"`,
		},
		{
			name: "MutualTLS",
			server: func(t *testing.T) (*server.Options, string) {
				o := plainOptions(t)
				tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: serverCert, KeyFile: serverKey, CaFile: ca.file, Verify: true})
				if err != nil {
					t.Fatal(err)
				}
				o.TLSConfig, o.TLS, o.TLSVerify, o.TLSTimeout = tc, true, true, 5
				return o, "tls"
			},
			good: tlsBlock(ca), bad: tlsBlock(untrusted), cause: "did not accept the client certificate",
		},
	}
}

// operator mints the JWTs of decentralized auth: an operator, one account
// with JetStream, and users signed by the account.
type operator struct {
	claims     *jwt.OperatorClaims
	account    nkeys.KeyPair
	accountPub string
	accountJWT string
	// The system account, which a server in operator mode needs.
	systemPub, systemJWT string
}

func newOperator(t *testing.T) *operator {
	t.Helper()
	okp, err := nkeys.CreateOperator()
	if err != nil {
		t.Fatal(err)
	}
	opub, _ := okp.PublicKey()
	oc := jwt.NewOperatorClaims(opub)
	oc.Name = "abi-test"
	ojwt, err := oc.Encode(okp)
	if err != nil {
		t.Fatal(err)
	}
	claims, err := jwt.DecodeOperatorClaims(ojwt)
	if err != nil {
		t.Fatal(err)
	}
	akp, _ := nkeys.CreateAccount()
	apub, _ := akp.PublicKey()
	ac := jwt.NewAccountClaims(apub)
	ac.Name = "TEAM_A"
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
	ajwt, err := ac.Encode(okp)
	if err != nil {
		t.Fatal(err)
	}
	skp, _ := nkeys.CreateAccount()
	spub, _ := skp.PublicKey()
	sc := jwt.NewAccountClaims(spub)
	sc.Name = "SYS"
	sjwt, err := sc.Encode(okp)
	if err != nil {
		t.Fatal(err)
	}
	return &operator{claims: claims, account: akp, accountPub: apub, accountJWT: ajwt, systemPub: spub, systemJWT: sjwt}
}

// serverOptions trust the operator and serve its account from memory.
func (o *operator) serverOptions(t *testing.T) (*server.Options, string) {
	t.Helper()
	opts := plainOptions(t)
	resolver := &server.MemAccResolver{}
	for pub, jwt := range map[string]string{o.accountPub: o.accountJWT, o.systemPub: o.systemJWT} {
		if err := resolver.Store(pub, jwt); err != nil {
			t.Fatal(err)
		}
	}
	opts.SystemAccount = o.systemPub
	opts.TrustedOperators = []*jwt.OperatorClaims{o.claims}
	opts.AccountResolver = resolver
	return opts, "nats"
}

// creds writes a .creds file for a new user with perms, valid until expires.
func (o *operator) creds(t *testing.T, perms jwt.Permissions, expires time.Time) string {
	t.Helper()
	ukp, _ := nkeys.CreateUser()
	upub, _ := ukp.PublicKey()
	useed, _ := ukp.Seed()
	uc := jwt.NewUserClaims(upub)
	uc.Name = "engine_a"
	uc.Permissions = perms
	uc.IssuedAt = time.Now().Add(-2 * time.Hour).Unix()
	uc.Expires = expires.Unix()
	ujwt, err := uc.Encode(o.account)
	if err != nil {
		t.Fatal(err)
	}
	data, err := jwt.FormatUserConfig(ujwt, useed)
	if err != nil {
		t.Fatal(err)
	}
	return writeFile(t, "engine_a.creds", data)
}

// testCA is a certificate authority made for a test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string
}

func newCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, file: writeFile(t, "ca.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))}
}

// issue makes a certificate and key signed by the CA: for the server on
// 127.0.0.1, or for a client.
func (ca *testCA) issue(t *testing.T, name string, isServer bool) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if isServer {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return writeFile(t, name+".pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		writeFile(t, name+"-key.pem", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
}

// A server with verify: true (mutual TLS, as server.conf's tls block
// suggests) refuses a client that shows no certificate. An engine given
// the CA but no certificate of its own must fail at start saying so and
// naming the keys to set, as it does for a certificate the server does not
// accept; the server's refusal alone reads "connection closed by remote
// after TLS handshake", or "certificate required", depending on timing.
func TestAnEngineWithoutAClientCertificateWhereTheServerWantsOneFailsSayingSo(t *testing.T) {
	ca := newCA(t, "engine test CA")
	serverCert, serverKey := ca.issue(t, "nats", true)
	o := plainOptions(t)
	tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: serverCert, KeyFile: serverKey, CaFile: ca.file, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	o.TLSConfig, o.TLS, o.TLSVerify, o.TLSTimeout = tc, true, true, 5
	s := natstest.StartWith(t, o)
	url := strings.Replace(s.ClientURL(), "nats://", "tls://", 1)
	// Each try meets the refusal in either of its forms.
	for range 5 {
		var stderr bytes.Buffer
		code := enginecmd.Run([]string{"serve", "--config", engineFile(t, url, fmt.Sprintf("{tls: {ca: %q}}", ca.file), "role: serve")}, &bytes.Buffer{}, &stderr, enginecmd.Options{})
		if code == 0 || !strings.Contains(stderr.String(), "client certificate") || !strings.Contains(stderr.String(), "nats.credentials.tls.cert") {
			t.Fatalf("an engine without a client certificate exits %d: %s\nwant a failure saying the server wants a client certificate, naming nats.credentials.tls.cert", code, stderr.String())
		}
	}
}
