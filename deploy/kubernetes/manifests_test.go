// Package kubernetes holds the engine's Kubernetes manifests. No cluster
// runs in the tests, so this test parses them and checks what a rolling
// handover depends on.
package kubernetes

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/nats-io/nats-server/v2/server"
	"go.uber.org/fx"
	"gopkg.in/yaml.v3"

	httpapi "github.com/abi-engine/engine/adapters/primary/http"
	"github.com/abi-engine/engine/adapters/primary/natsapi"
	"github.com/abi-engine/engine/adapters/secondary/objectstorage/s3"
	"github.com/abi-engine/engine/adapters/secondary/vectorstore/qdrant"
	"github.com/abi-engine/engine/app"
	"github.com/abi-engine/engine/app/config"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/enginecmd"
	"github.com/abi-engine/engine/internal/heapfloor"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/internal/termcache"
)

type probe struct {
	HTTPGet struct {
		Path string `yaml:"path"`
		Port string `yaml:"port"`
	} `yaml:"httpGet"`
	PeriodSeconds    int `yaml:"periodSeconds"`
	FailureThreshold int `yaml:"failureThreshold"`
}

type envVar struct {
	Name      string `yaml:"name"`
	Value     string `yaml:"value"`
	ValueFrom struct {
		FieldRef struct {
			FieldPath string `yaml:"fieldPath"`
		} `yaml:"fieldRef"`
	} `yaml:"valueFrom"`
}

type deployment struct {
	Kind string `yaml:"kind"`
	Spec struct {
		Replicas int `yaml:"replicas"`
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		Strategy struct {
			Type          string `yaml:"type"`
			RollingUpdate struct {
				MaxSurge       any `yaml:"maxSurge"`
				MaxUnavailable any `yaml:"maxUnavailable"`
			} `yaml:"rollingUpdate"`
		} `yaml:"strategy"`
		Template struct {
			Metadata struct {
				Labels map[string]string `yaml:"labels"`
			} `yaml:"metadata"`
			Spec struct {
				TerminationGracePeriodSeconds int   `yaml:"terminationGracePeriodSeconds"`
				AutomountServiceAccountToken  *bool `yaml:"automountServiceAccountToken"`
				SecurityContext               struct {
					RunAsNonRoot bool `yaml:"runAsNonRoot"`
					RunAsUser    int  `yaml:"runAsUser"`
				} `yaml:"securityContext"`
				Containers []struct {
					Image string   `yaml:"image"`
					Args  []string `yaml:"args"`
					Ports []struct {
						Name          string `yaml:"name"`
						ContainerPort int    `yaml:"containerPort"`
					} `yaml:"ports"`
					Env     []envVar `yaml:"env"`
					EnvFrom []struct {
						SecretRef struct {
							Name string `yaml:"name"`
						} `yaml:"secretRef"`
					} `yaml:"envFrom"`
					Resources struct {
						Requests map[string]string `yaml:"requests"`
						Limits   map[string]string `yaml:"limits"`
					} `yaml:"resources"`
					Lifecycle struct {
						PreStop struct {
							Sleep struct {
								Seconds int `yaml:"seconds"`
							} `yaml:"sleep"`
						} `yaml:"preStop"`
					} `yaml:"lifecycle"`
					StartupProbe   probe `yaml:"startupProbe"`
					LivenessProbe  probe `yaml:"livenessProbe"`
					ReadinessProbe probe `yaml:"readinessProbe"`
					VolumeMounts   []struct {
						Name      string `yaml:"name"`
						MountPath string `yaml:"mountPath"`
					} `yaml:"volumeMounts"`
				} `yaml:"containers"`
				Volumes []struct {
					Name      string `yaml:"name"`
					ConfigMap struct {
						Name string `yaml:"name"`
					} `yaml:"configMap"`
				} `yaml:"volumes"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type configMap struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Data map[string]string `yaml:"data"`
}

type secret struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	StringData map[string]string `yaml:"stringData"`
}

type kustomization struct {
	Resources []string `yaml:"resources"`
	Images    []struct {
		Name    string `yaml:"name"`
		NewName string `yaml:"newName"`
		NewTag  string `yaml:"newTag"`
	} `yaml:"images"`
	Labels []struct {
		Pairs            map[string]string `yaml:"pairs"`
		IncludeSelectors bool              `yaml:"includeSelectors"`
		IncludeTemplates bool              `yaml:"includeTemplates"`
	} `yaml:"labels"`
}

func load(t *testing.T, file string, v any) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

// rolloutLabel is the pod label the engine reads as ABI_ROLLOUT_ID: the
// Deployment controller gives every pod of a ReplicaSet a hash of its pod
// template there.
const rolloutLabel = "pod-template-hash"

// manifests are every file, parsed.
type manifests struct {
	deploy deployment
	cm     configMap
	secret secret
	kust   kustomization
}

func loadAll(t *testing.T) manifests {
	t.Helper()
	var m manifests
	load(t, "deployment.yaml", &m.deploy)
	load(t, "configmap.yaml", &m.cm)
	load(t, "secret.example.yaml", &m.secret)
	load(t, "kustomization.yaml", &m.kust)
	return m
}

// engineConfig loads the ConfigMap's engine.yaml with the Secret's keys set
// to test values and the rollout id the pod would get.
func engineConfig(t *testing.T, m manifests, rollout string) *config.Config {
	t.Helper()
	src, ok := m.cm.Data["engine.yaml"]
	if !ok {
		t.Fatalf("the ConfigMap has no engine.yaml")
	}
	env := map[string]string{config.EnvRolloutID: rollout}
	for k := range m.secret.StringData {
		env[k] = "test-" + strings.ToLower(k)
	}
	// The caller secret must be 32 bytes at least.
	env["ABI_CALLER_SECRET"] = strings.Repeat("test-abi_caller_secret ", 2)
	env["ABI_PG_DSN"] = "postgres://engine:pw@db:5432/engine"
	env["ABI_S3_ENDPOINT"] = "https://s3.example.com"
	cfg, err := config.Parse("engine.yaml", []byte(src), func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("engine.yaml: %v", err)
	}
	return cfg
}

func TestTheConfigMapIsOnSharedBackends(t *testing.T) {
	m := loadAll(t)
	cfg := engineConfig(t, m, "1.4.0")
	if cfg.NATS.Engine.RolloutID != "1.4.0" {
		t.Fatalf("rollout id %q: ABI_ROLLOUT_ID does not reach the configuration", cfg.NATS.Engine.RolloutID)
	}
	built, err := app.BuildStorage(cfg)
	if err != nil {
		t.Fatalf("BuildStorage: %v", err)
	}
	if err := app.CheckStorage(cfg, built); err != nil {
		t.Fatalf("a rollout on the ConfigMap's backends is refused: %v", err)
	}
	e := cfg.NATS.Engine
	if e.Role != "serve" || e.BucketReplicas != 3 || !e.HotStandby || cfg.HTTP.Token != "test-abi_http_token" {
		t.Fatalf("nats.engine %+v, http.token %q", e, cfg.HTTP.Token)
	}
	s := cfg.Services
	got := []string{s.KeyValue.Adapter, s.Document.Adapter, s.ObjectStorage.Adapter, s.VectorStore.Adapter, s.Cache.Adapter}
	if want := []string{"postgres", "postgres", "s3", "qdrant", "keyvalue"}; !slices.Equal(got, want) || len(s.Secret) != 1 || s.Secret[0].Adapter != "env" {
		t.Fatalf("adapters %v and secret %+v, want %v and env", got, s.Secret, want)
	}
	host, _, err := net.SplitHostPort(cfg.HTTP.Listen)
	if err != nil || host != "0.0.0.0" {
		t.Fatalf("http.listen %q: a probe from the kubelet must reach it", cfg.HTTP.Listen)
	}
}

func TestEveryVariableOfTheConfigMapIsInTheSecret(t *testing.T) {
	m := loadAll(t)
	if m.secret.Kind != "Secret" || m.secret.Metadata.Name != "abi-engine" {
		t.Fatalf("secret.example.yaml is %s %s", m.secret.Kind, m.secret.Metadata.Name)
	}
	vars := regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`).FindAllStringSubmatch(m.cm.Data["engine.yaml"], -1)
	if len(vars) == 0 {
		t.Fatalf("engine.yaml takes nothing from the Secret")
	}
	for _, v := range vars {
		if _, ok := m.secret.StringData[v[1]]; !ok {
			t.Errorf("engine.yaml uses ${%s}, which the Secret lacks", v[1])
		}
	}
	for k, v := range m.secret.StringData {
		if !strings.Contains(v, "<") || !strings.Contains(v, ">") {
			t.Errorf("the example Secret's %s is %q, not a <placeholder>", k, v)
		}
	}
}

func TestTheDeploymentHandsOverOnARollingUpdate(t *testing.T) {
	m := loadAll(t)
	d := m.deploy
	cfg := engineConfig(t, m, "1.4.0")
	if d.Kind != "Deployment" || d.Spec.Replicas != 1 {
		t.Fatalf("%s with %d replicas: one engine serves an account", d.Kind, d.Spec.Replicas)
	}
	ru := d.Spec.Strategy.RollingUpdate
	if d.Spec.Strategy.Type != "RollingUpdate" || ru.MaxSurge != 1 || ru.MaxUnavailable != 0 {
		t.Fatalf("strategy %+v: the new pod must start (and stand by) before the old one stops", d.Spec.Strategy)
	}
	pod := d.Spec.Template
	for k, v := range d.Spec.Selector.MatchLabels {
		if pod.Metadata.Labels[k] != v {
			t.Fatalf("the selector's %s=%s is not on the pod", k, v)
		}
	}
	sc := pod.Spec.SecurityContext
	if !sc.RunAsNonRoot || sc.RunAsUser == 0 {
		t.Fatalf("the pod may run as root: %+v", sc)
	}
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]

	_, port, _ := net.SplitHostPort(cfg.HTTP.Listen)
	if len(c.Ports) != 1 || c.Ports[0].Name != "http" || strconv.Itoa(c.Ports[0].ContainerPort) != port {
		t.Fatalf("ports %+v, want http on %s (http.listen)", c.Ports, port)
	}
	for _, p := range []struct {
		name  string
		probe probe
		path  string
	}{{"readiness", c.ReadinessProbe, "/readyz"}, {"liveness", c.LivenessProbe, "/healthz"}, {"startup", c.StartupProbe, "/healthz"}} {
		if p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Port != "http" {
			t.Errorf("%s probe %+v, want %s on http", p.name, p.probe.HTTPGet, p.path)
		}
	}
	// The API listens only after the claim, which may watch the holder for
	// a whole lease: liveness must not count before.
	if budget := c.StartupProbe.PeriodSeconds * c.StartupProbe.FailureThreshold; budget <= cfg.NATS.Engine.LeaseSeconds {
		t.Errorf("the startup probe allows %d s, not above a lease (%d s)", budget, cfg.NATS.Engine.LeaseSeconds)
	}

	if len(c.EnvFrom) != 1 || c.EnvFrom[0].SecretRef.Name != m.secret.Metadata.Name {
		t.Fatalf("envFrom %+v, want the %s Secret", c.EnvFrom, m.secret.Metadata.Name)
	}

	if len(c.Args) != 2 || c.Args[0] != "--config" {
		t.Fatalf("args %v, want --config <file>", c.Args)
	}
	dir, file := filepath.Split(c.Args[1])
	if _, ok := m.cm.Data[file]; !ok {
		t.Fatalf("--config %s: the ConfigMap has no %s", c.Args[1], file)
	}
	mounted := false
	for _, vm := range c.VolumeMounts {
		for _, v := range pod.Spec.Volumes {
			if vm.Name == v.Name && v.ConfigMap.Name == m.cm.Metadata.Name && filepath.Clean(vm.MountPath) == filepath.Clean(dir) {
				mounted = true
			}
		}
	}
	if !mounted {
		t.Fatalf("the ConfigMap %s is not mounted at %s", m.cm.Metadata.Name, dir)
	}
	if !slices.ContainsFunc(c.VolumeMounts, func(vm struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
	}) bool {
		return filepath.Clean(vm.MountPath) == filepath.Clean(cfg.DataDir)
	}) {
		t.Fatalf("data_dir %s is not a mounted volume (the root file system is read-only)", cfg.DataDir)
	}
}

func TestTheKustomizationSetsTheImage(t *testing.T) {
	m := loadAll(t)
	for _, r := range m.kust.Resources {
		if _, err := os.Stat(r); err != nil {
			t.Errorf("kustomization resource %s: %v", r, err)
		}
	}
	if slices.Contains(m.kust.Resources, "secret.example.yaml") {
		t.Errorf("the kustomization applies the example Secret, which would overwrite the real one")
	}
	c := m.deploy.Spec.Template.Spec.Containers[0]
	if len(m.kust.Images) != 1 || m.kust.Images[0].Name != c.Image || m.kust.Images[0].NewTag == "" {
		t.Fatalf("images %+v do not set the container's image %q", m.kust.Images, c.Image)
	}
}

// An engine that finds the lease held by its own rollout id watches the
// holder for a lease and, seeing it renew, exits: that is what keeps a
// second replica from serving. With the release's image tag as the rollout
// id, every rollout that kept the tag (kubectl rollout restart, the usual
// way to take up a changed ConfigMap or Secret, which the engine reads at
// start, or any change of the pod's resources, probes or environment)
// started a pod that exited after a lease, again and again, and the
// rollout never ended. The Deployment controller labels every pod with a
// hash of its template, one per ReplicaSet: read as the rollout id, every
// rollout Kubernetes makes is one to the engine, and two pods of one
// ReplicaSet are still two engines of one rollout.
func TestEveryPodTemplateIsARolloutOfItsOwn(t *testing.T) {
	m := loadAll(t)
	d := m.deploy
	c := d.Spec.Template.Spec.Containers[0]
	i := slices.IndexFunc(c.Env, func(e envVar) bool { return e.Name == config.EnvRolloutID })
	if i < 0 || c.Env[i].ValueFrom.FieldRef.FieldPath != fmt.Sprintf("metadata.labels['%s']", rolloutLabel) {
		t.Fatalf("%s is not set from the pod's %s label: %+v", config.EnvRolloutID, rolloutLabel, c.Env)
	}
	if _, ok := d.Spec.Selector.MatchLabels[rolloutLabel]; ok {
		t.Fatalf("the selector holds %s, which changes every rollout; the controller adds it to each ReplicaSet's", rolloutLabel)
	}
	if v, ok := d.Spec.Template.Metadata.Labels[rolloutLabel]; ok {
		t.Fatalf("the pod template sets %s=%s, which is the controller's to set", rolloutLabel, v)
	}
	for _, l := range m.kust.Labels {
		if _, ok := l.Pairs[rolloutLabel]; ok {
			t.Fatalf("kustomization.yaml sets %s, which is the controller's to set", rolloutLabel)
		}
	}
	// The controller writes the hash in these letters and digits, ten at
	// most; the configuration takes any of them as a rollout id.
	const alphabet = "bcdfghjklmnpqrstvwxz2456789"
	for _, hash := range []string{"5d4b8c7f9", "bcdfghjklm", "2456789xzw", alphabet[:1]} {
		if got := engineConfig(t, m, hash).NATS.Engine.RolloutID; got != hash {
			t.Fatalf("rollout id %q from the pod's %s %q", got, rolloutLabel, hash)
		}
	}
}

func TestTheDockerfileBuildsAStaticNonRootImage(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var froms []string
	var user string
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		lines = append(lines, l)
		switch {
		case strings.HasPrefix(l, "FROM "):
			froms = append(froms, strings.TrimPrefix(l, "FROM "))
		case strings.HasPrefix(l, "USER "):
			user = strings.TrimPrefix(l, "USER ")
		}
	}
	if len(froms) != 2 || froms[0] != "golang:1.26 AS build" {
		t.Fatalf("stages %q, want golang:1.26 AS build, then the runtime", froms)
	}
	if !strings.HasPrefix(froms[1], "gcr.io/distroless/static") && froms[1] != "scratch" {
		t.Fatalf("runtime stage %q, want distroless static or scratch", froms[1])
	}
	text := strings.Join(lines, "\n")
	for _, want := range []string{"ARG VERSION", "CGO_ENABLED=0", `-X main.version=${VERSION}`, "./cmd/engine", "COPY --from=build", "ENTRYPOINT"} {
		if !strings.Contains(text, want) {
			t.Errorf("the Dockerfile lacks %q", want)
		}
	}
	uid, _, _ := strings.Cut(user, ":")
	if uid == "" || uid == "0" || uid == "root" {
		t.Fatalf("USER %q: the image must not run as root", user)
	}
	var d deployment
	load(t, "deployment.yaml", &d)
	if want := strconv.Itoa(d.Spec.Template.Spec.SecurityContext.RunAsUser); uid != want {
		t.Fatalf("the image runs as %s, the deployment as %s", uid, want)
	}
}

// The build context is what the image builder is sent and what COPY . .
// puts in the build stage. An engine run from the checkout keeps its data,
// and perhaps a .env of secrets, there: none of it may reach the builder,
// nor may the history.
func TestTheImageIsBuiltWithoutHistoryEngineDataOrSecrets(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", ".dockerignore"))
	if err != nil {
		t.Fatalf("no .dockerignore: COPY . . sends the whole checkout: %v", err)
	}
	var patterns []string
	for l := range strings.Lines(string(b)) {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			patterns = append(patterns, l)
		}
	}
	ignored := func(path string) bool {
		for _, p := range patterns {
			if p == path || strings.HasPrefix(path, p+"/") {
				return true
			}
			if rest, ok := strings.CutPrefix(p, "**/"); ok {
				if m, _ := filepath.Match(rest, filepath.Base(path)); m {
					return true
				}
			}
		}
		return false
	}
	for _, path := range []string{".git", ".engine", ".engine/keyvalue.db", ".env", "deploy/engine.env", "bin/engine", "engine"} {
		if !ignored(path) {
			t.Errorf("%s is sent to the image builder", path)
		}
	}
	for _, path := range []string{"go.mod", "cmd/engine/main.go", "cmd/enginebench/main.go", "app/engine.go"} {
		if ignored(path) {
			t.Errorf("%s, which the build needs, is left out of the build context", path)
		}
	}
}

// The Secret's NATS user is an engine user of deploy/nats, the
// configuration whose permissions the account tests hold.
func TestTheNATSUserIsTheDeployedEngineUser(t *testing.T) {
	user := engineConfig(t, loadAll(t), "1.4.0").NATS.Credentials.User
	opts := natstest.DeployedOptions(t, "server.conf")
	for _, u := range opts.Users {
		if u.Username != user {
			continue
		}
		if u.Permissions == nil || u.Permissions.Publish == nil || !slices.Contains(u.Permissions.Publish.Allow, "$KV.ABI_ENGINE.>") ||
			u.Account == nil || u.Account.Name != "TEAM_A" {
			t.Fatalf("nats.credentials.user %q is not an engine user of TEAM_A in deploy/nats: %+v", user, u)
		}
		return
	}
	t.Fatalf("nats.credentials.user %q is no user of deploy/nats/accounts.conf", user)
}

// overlay is the nats-only overlay's kustomization.
type overlay struct {
	Resources []string `yaml:"resources"`
	Patches   []struct {
		Path string `yaml:"path"`
	} `yaml:"patches"`
}

// The nats-only overlay patches the base's ConfigMap with a configuration
// whose every service is in JetStream buckets of three replicas, which a
// rollout accepts as shared, and asks the Secret for nothing it lacks.
func TestTheNATSOnlyOverlayKeepsEveryServiceInJetStream(t *testing.T) {
	const dir = "overlays/nats-only"
	var o overlay
	load(t, filepath.Join(dir, "kustomization.yaml"), &o)
	if !slices.Equal(o.Resources, []string{"../.."}) || len(o.Patches) != 1 {
		t.Fatalf("overlay resources %v, patches %+v; want the base and one patch", o.Resources, o.Patches)
	}
	base := loadAll(t)
	var patch configMap
	load(t, filepath.Join(dir, o.Patches[0].Path), &patch)
	if patch.Kind != "ConfigMap" || patch.Metadata.Name != base.cm.Metadata.Name {
		t.Fatalf("the patch is %s %s, want the base's ConfigMap %s", patch.Kind, patch.Metadata.Name, base.cm.Metadata.Name)
	}
	m := base
	m.cm = patch
	cfg := engineConfig(t, m, "1.4.0")
	built, err := app.BuildStorage(cfg)
	if err != nil {
		t.Fatalf("BuildStorage: %v", err)
	}
	if err := app.CheckStorage(cfg, built); err != nil {
		t.Fatalf("a rollout on the overlay's backends is refused: %v", err)
	}
	s := cfg.Services
	got := []string{s.KeyValue.Adapter, s.Document.Adapter, s.ObjectStorage.Adapter, s.VectorStore.Adapter, s.Cache.Adapter}
	if want := []string{"jetstream", "jetstream", "jetstream", "off", "keyvalue"}; !slices.Equal(got, want) {
		t.Fatalf("adapters %v, want %v", got, want)
	}
	for _, b := range built {
		d, ok := b.Declaration.Storage.(interface{ Describe() string })
		if b.Declaration.Off || b.Declaration.Service == "cache" || b.Declaration.Service == "secret" {
			continue
		}
		if !ok || !strings.Contains(d.Describe(), "3 replica(s)") {
			t.Errorf("%s is not on three replicas: %+v", b.Declaration.Service, b.Declaration.Storage)
		}
	}
	if cfg.NATS.Engine.BucketReplicas != 3 {
		t.Fatalf("the lease bucket has %d replicas, want 3 like the data", cfg.NATS.Engine.BucketReplicas)
	}
	if base := engineConfig(t, base, "1.4.0"); cfg.NATS.Credentials.User != base.NATS.Credentials.User {
		t.Fatalf("the overlay connects as %q, the base as %q: the engine user of deploy/nats", cfg.NATS.Credentials.User, base.NATS.Credentials.User)
	}
	vars := regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`).FindAllStringSubmatch(patch.Data["engine.yaml"], -1)
	for _, v := range vars {
		if _, ok := base.secret.StringData[v[1]]; !ok {
			t.Errorf("the overlay's engine.yaml uses ${%s}, which the Secret lacks", v[1])
		}
	}
}

// The deploy reaches PostgreSQL and Qdrant over TLS that checks whom it
// reaches. sslmode=require encrypts without verifying the server, so anyone
// on the pod network could stand in for the database and take the engine's
// data, and an api_key sent over plain gRPC crosses the network readable.
// The Secret's example DSN verifies the server's certificate and name
// (verify-full), and the ConfigMap's Qdrant block, which sends a key, uses
// TLS.
func TestTheSharedBackendsAreReachedOverTLSThatVerifiesTheServer(t *testing.T) {
	m := loadAll(t)
	example := m.secret.StringData["ABI_PG_DSN"]
	dsn := regexp.MustCompile(`<[^>]*>`).ReplaceAllString(example, "placeholder")
	pg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("the example ABI_PG_DSN %q: %v", example, err)
	}
	for i, tc := range append([]*tls.Config{pg.TLSConfig}, fallbackTLS(pg.Fallbacks)...) {
		if tc == nil {
			t.Errorf("the example ABI_PG_DSN %q connects (try %d) without TLS", example, i)
		} else if tc.InsecureSkipVerify || tc.ServerName != "placeholder" {
			t.Errorf("the example ABI_PG_DSN %q connects (try %d) without verifying the server's certificate (skip %v) and name (%q)",
				example, i, tc.InsecureSkipVerify, tc.ServerName)
		}
	}
	var q qdrant.Config
	if err := engineConfig(t, m, "1.4.0").Services.VectorStore.Config.Decode(&q); err != nil {
		t.Fatalf("the ConfigMap's qdrant block: %v", err)
	}
	if q.APIKey != "" && !q.TLS {
		t.Errorf("the ConfigMap's qdrant block sends its api_key without TLS: %+v", q)
	}
}

func fallbackTLS(fs []*pgconn.FallbackConfig) []*tls.Config {
	out := make([]*tls.Config, len(fs))
	for i, f := range fs {
		out[i] = f.TLSConfig
	}
	return out
}

// designedMemory is what a serving engine may hold in memory while every
// caller keeps to the bounds docs/protocol.md gives: the overflow bytes
// parked for all callers, the calls running and waiting for a slot (each
// up to nats-server's default max_payload, which deploy/nats keeps), the
// chunks of every object transfer (a window and three more for
// an upload) and the part each holds on its way into S3, the HTTP API's
// bodies, every connection the HTTP API admits (the clients' and the
// trusted proxies') while a request head arrives on it, what a keyvalue
// store keeps for a term, and the heap floor the collector lets garbage
// grow to.
func designedMemory() int64 {
	// connStack is a connection's goroutine's stack while its head
	// arrives, some 8 KiB, besides httpapi.MaxConnHeap of heap.
	const connStack = 8 << 10
	const maxPayload = server.MAX_PAYLOAD_SIZE
	const callsHeld = natsapi.DefaultMaxConcurrent + natsapi.DefaultMaxQueued
	return natsapi.DefaultMaxOverflowParked +
		callsHeld*maxPayload +
		natsapi.DefaultMaxTransfers*((natsapi.DefaultTransferWindow+3)*natsapi.DefaultTransferChunkSize+s3.PartSize) +
		httpapi.DefaultBodyBudget +
		(httpapi.MaxClientConns+httpapi.MaxProxyConns)*(httpapi.MaxConnHeap+connStack) +
		termcache.Bytes +
		heapfloor.Default
}

// quantity parses a Kubernetes memory quantity in Mi or Gi, or a
// GOMEMLIMIT in MiB or GiB, to bytes.
func quantity(t *testing.T, what, q string) int64 {
	t.Helper()
	for _, u := range []struct {
		suffix string
		shift  uint
	}{{"GiB", 30}, {"MiB", 20}, {"Gi", 30}, {"Mi", 20}} {
		if n, ok := strings.CutSuffix(q, u.suffix); ok {
			v, err := strconv.ParseInt(n, 10, 64)
			if err == nil && v > 0 {
				return v << u.shift
			}
		}
	}
	t.Fatalf("%s %q: want a whole number of Mi or Gi (MiB or GiB for GOMEMLIMIT)", what, q)
	return 0
}

// A serving engine killed for its memory dies holding the lease: it
// neither releases nor drains, the calls it held are lost, and no engine
// serves until a lease has passed. Callers that keep to the documented
// bounds may make it hold over a gigabyte (1 GiB of parked overflow bytes
// alone), so the container's limit must hold that, GOMEMLIMIT must make
// the collector run before the heap grows past the limit (at GOGC's 100 a
// heap of that much live data would grow to twice it), and the request
// must reserve it, or node-pressure eviction, which picks pods over their
// requests first, would pick the serving engine.
func TestTheMemoryLimitHoldsWhatTheEngineMayHoldByDesign(t *testing.T) {
	c := loadAll(t).deploy.Spec.Template.Spec.Containers[0]
	need := designedMemory()
	limit := quantity(t, "limits.memory", c.Resources.Limits["memory"])
	request := quantity(t, "requests.memory", c.Resources.Requests["memory"])
	if limit <= need {
		t.Errorf("limits.memory %d MiB is not above the %d MiB the engine may hold by design", limit>>20, need>>20)
	}
	if request < need {
		t.Errorf("requests.memory %d MiB is below the %d MiB the engine may hold by design", request>>20, need>>20)
	}
	i := slices.IndexFunc(c.Env, func(e envVar) bool { return e.Name == "GOMEMLIMIT" })
	if i < 0 {
		t.Fatalf("no GOMEMLIMIT: the collector does not know of the %d MiB limit, and a heap of %d MiB live would grow past it",
			limit>>20, need>>20)
	}
	soft := quantity(t, "GOMEMLIMIT", c.Env[i].Value)
	if soft < need {
		t.Errorf("GOMEMLIMIT %d MiB is below the %d MiB the engine may hold by design: the collector would run without end",
			soft>>20, need>>20)
	}
	if soft > limit*9/10 {
		t.Errorf("GOMEMLIMIT %d MiB leaves less than a tenth of limits.memory (%d MiB) for what the collector cannot free",
			soft>>20, limit>>20)
	}
}

// A CPU limit is a CFS quota: once the engine's calls have used a period's
// share, every goroutine waits for the next, the lease keeper's renewals
// and a handover's release among them, and Go sizes GOMAXPROCS to it. The
// engine is given none; its request is what the scheduler reserves.
func TestTheEngineHasNoCPULimit(t *testing.T) {
	c := loadAll(t).deploy.Spec.Template.Spec.Containers[0]
	if l, ok := c.Resources.Limits["cpu"]; ok {
		t.Errorf("limits.cpu is %s: a quota throttles the lease's renewals with the calls", l)
	}
	if c.Resources.Requests["cpu"] == "" {
		t.Errorf("no requests.cpu: the scheduler reserves nothing for the engine")
	}
}

// Kubernetes kills the container terminationGracePeriodSeconds after it
// asks it to stop, whatever it is doing. The engine's own bound on its
// stop is the sum of its steps (app.New's stop timeout): the jobs' runs,
// the release, the drain, the modules' stop (the activity log writes the
// release there) and the closes. A grace period short of it lets
// Kubernetes kill a stop the engine still counts as in time, cutting off
// a module's stop and the activity log's last records. The bound is the
// engine's, so a change of its timings, or of the ConfigMap's, fails here.
func TestTheGracePeriodOutlastsTheEnginesLongestStop(t *testing.T) {
	base := loadAll(t)
	var o overlay
	load(t, filepath.Join("overlays/nats-only", "kustomization.yaml"), &o)
	nats := base
	load(t, filepath.Join("overlays/nats-only", o.Patches[0].Path), &nats.cm)
	pod := base.deploy.Spec.Template.Spec
	grace := time.Duration(pod.TerminationGracePeriodSeconds) * time.Second
	// The grace period runs from the preStop hook on, before the signal.
	preStop := time.Duration(pod.Containers[0].Lifecycle.PreStop.Sleep.Seconds) * time.Second
	for name, m := range map[string]manifests{"base": base, "nats-only": nats} {
		cfg := engineConfig(t, m, "1.4.0")
		a := app.New(app.Options{Config: cfg, Logger: slog.New(slog.DiscardHandler)})
		if err := a.Err(); err != nil {
			t.Fatalf("%s: the engine's application: %v", name, err)
		}
		if stop := a.StopTimeout() + enginecmd.StopSlack; grace < preStop+stop {
			t.Errorf("%s: terminationGracePeriodSeconds %v is shorter than the preStop hook's %v and the engine's longest stop, %v (lease_seconds %d, drain_seconds %d)",
				name, grace, preStop, stop, cfg.NATS.Engine.LeaseSeconds, cfg.NATS.Engine.DrainSeconds)
		}
	}
}

// endpointsLag is how long the Service's proxies and ingresses may take to
// stop sending new connections to a pod that is being deleted.
const endpointsLag = 10 * time.Second

// Kubernetes deletes the old pod from the Service's endpoints and signals
// it at the same moment, and the proxies on every node learn of the
// deletion some seconds later. The engine closes its HTTP listener as soon
// as it has released the lease, a moment after the signal, so without a
// wait before the signal the HTTP API's new connections that still reach
// the old pod are refused on every rollout, while the new pod stands by
// ready to take them. A preStop sleep keeps the old engine serving, NATS
// and HTTP alike, until the proxies have let go of it; the handover comes
// that much later, never with a gap. The image has no shell and no sleep
// command, so the hook is the kubelet's own sleep action.
func TestTheOldPodKeepsListeningUntilTheServiceHasLetGoOfIt(t *testing.T) {
	c := loadAll(t).deploy.Spec.Template.Spec.Containers[0]
	if got := time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second; got < endpointsLag {
		t.Fatalf("preStop sleeps %v before the engine is signalled, want %v at least for the proxies to stop sending it connections", got, endpointsLag)
	}
}

// overlayEngine parses the nats-only overlay's engine.yaml as a pod of
// rollout gets it, on the deploy/nats server d on one node: the lease
// bucket and the data buckets on one replica, the HTTP API on a port of
// its own, data_dir a directory of the test's.
func overlayEngine(t *testing.T, d *natstest.Deployed, rollout string) *config.Config {
	t.Helper()
	var o overlay
	load(t, filepath.Join("overlays/nats-only", "kustomization.yaml"), &o)
	var patch configMap
	load(t, filepath.Join("overlays/nats-only", o.Patches[0].Path), &patch)
	src := patch.Data["engine.yaml"]
	if !strings.Contains(src, "replicas: 3") {
		t.Fatalf("the overlay's engine.yaml has no replicas: 3 to run on one node")
	}
	src = strings.ReplaceAll(src, "replicas: 3", "replicas: 1")
	env := map[string]string{
		config.EnvRolloutID: rollout,
		"NATS_PASSWORD":     natstest.Password("engine_a"),
		"ABI_CALLER_SECRET": strings.Repeat("test-abi_caller_secret ", 2),
		"ABI_HTTP_TOKEN":    "test-abi_http_token",
	}
	cfg, err := config.Parse("engine.yaml", []byte(src), func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("engine.yaml: %v", err)
	}
	cfg.NATS.URL = d.Server.ClientURL()
	cfg.HTTP.Listen = "127.0.0.1:0"
	cfg.DataDir = t.TempDir()
	return cfg
}

// An evicted pod (a node drained for an upgrade, a pod deleted) is
// replaced by a pod of the same ReplicaSet, so of the same rollout, which
// Kubernetes starts as soon as it deletes the old one, while the old
// engine still serves through the preStop hook and up to its release. An
// engine that finds its own rollout holding the lease watches it and,
// seeing it renew, exits: the replacement failed, and waited out the
// kubelet's back-off before it started again, while no engine served. The
// ConfigMap's engine stands by instead, hot, and takes over when the old
// one releases: the same handover as a rollout's.
func TestAPodThatReplacesAnEvictedOneTakesOverAtTheRelease(t *testing.T) {
	d := natstest.StartDeployed(t)
	const rollout = "5d4b8c7f9"
	start := func(name string, extra ...fx.Option) (*fx.App, *app.Engine) {
		var e *app.Engine
		opts := append([]fx.Option{fx.Populate(&e)}, extra...)
		a := app.New(app.Options{Config: overlayEngine(t, d, rollout), Version: name,
			Logger: slog.New(slog.DiscardHandler)}, opts...)
		if err := a.Err(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		if err := a.Start(ctx); err != nil {
			t.Fatalf("the %s engine of rollout %s did not start: %v", name, rollout, err)
		}
		t.Cleanup(func() { _ = a.Stop(context.Background()) })
		return a, e
	}
	old, _ := start("evicted")

	serving := make(chan struct{})
	var once sync.Once
	_, replacement := start("replacement", fx.Invoke(func(e *app.Engine) {
		e.Observe(func(tr domain.Transition) {
			if tr.To == domain.StateServing {
				once.Do(func() { close(serving) })
			}
		})
	}))
	if s := replacement.Status().State; s != domain.StateStandby.String() {
		t.Fatalf("the replacement is %s while the evicted engine serves, want %s", s, domain.StateStandby)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	if err := old.Stop(ctx); err != nil {
		t.Fatalf("the evicted engine's stop: %v", err)
	}
	select {
	case <-serving:
	case <-time.After(time.Minute):
		t.Fatalf("the replacement did not take over within a minute of the release; it is %s", replacement.Status().State)
	}
}

// The engine never calls the Kubernetes API. Kubernetes mounts a token of
// the pod's service account into every container unless told not to, and
// whoever made the engine run code of theirs would find a credential for
// the cluster's API beside the engine's own secrets.
func TestThePodHoldsNoTokenForTheKubernetesAPI(t *testing.T) {
	pod := loadAll(t).deploy.Spec.Template.Spec
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Fatalf("automountServiceAccountToken is %v: the pod gets a token for the Kubernetes API, which the engine never calls",
			pod.AutomountServiceAccountToken)
	}
}
