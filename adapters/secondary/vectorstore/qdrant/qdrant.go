// Package qdrant is a vector store on a Qdrant server, reached over gRPC
// (github.com/qdrant/go-client). Every engine reaches the same server, so
// its data is shared. Search runs over Qdrant's HNSW index: approximate.
//
// It departs from the SQLite and memory adapters where Qdrant does, as
// docs/protocol.md tells callers: a filter value that is a list or an
// object, and a payload field named _engine_id (the point's string id),
// are refused as invalid arguments; a filter matches a payload list when
// any of its elements equals the value.
package qdrant

import (
	"context"
	"crypto/sha1"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"

	"github.com/qdrant/go-client/qdrant"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/abi-engine/engine/adapters/secondary/vectorstore/internal/vecutil"
	"github.com/abi-engine/engine/ports"
)

// Config is the block under services.vector_store.config.
type Config struct {
	// Host of the Qdrant server.
	Host string `yaml:"host"`
	// Port is Qdrant's gRPC port; 0 means 6334.
	Port int `yaml:"port"`
	// APIKey is sent with every call when set.
	APIKey string `yaml:"api_key" secret:"true"`
	// TLS connects with TLS.
	TLS bool `yaml:"tls"`
	// CollectionPrefix is put before every collection name in Qdrant, so
	// several deploys (or test runs) can share one server without seeing
	// each other's collections.
	CollectionPrefix string `yaml:"collection_prefix"`
}

// LocalStorage implements ports.StorageConfig: every engine reaches the
// server.
func (Config) LocalStorage() string { return "" }

// Check refuses, without connecting, the settings Open cannot work with,
// naming each under prefix: the registry calls it when the configuration
// is built, before anything opens.
func (c Config) Check(prefix string) error {
	if c.Host == "" {
		return fmt.Errorf("%s.host is empty: %w", prefix, ports.ErrInvalidArgument)
	}
	if c.Port < 0 || c.Port > 65535 {
		return fmt.Errorf("%s.port %d: want 1 to 65535: %w", prefix, c.Port, ports.ErrInvalidArgument)
	}
	if !prefixPattern.MatchString(c.CollectionPrefix) {
		return fmt.Errorf("%s.collection_prefix %q: want up to 64 of A-Z a-z 0-9 _ -: %w", prefix, c.CollectionPrefix, ports.ErrInvalidArgument)
	}
	return nil
}

// idKey is the payload field that keeps a point's original string id,
// since Qdrant ids are UUIDs or integers.
const idKey = "_engine_id"

var prefixPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{0,64}$`)

// Store is one client of the server.
type Store struct {
	client *qdrant.Client
	prefix string
}

var _ ports.VectorStore = (*Store)(nil)

// Open checks the config and connects. The client dials lazily, so an
// unreachable server shows on the first call.
func Open(_ context.Context, c Config) (*Store, error) {
	if c.Host == "" {
		return nil, fmt.Errorf("vector_store qdrant: host is empty: %w", ports.ErrInvalidArgument)
	}
	if c.Port < 0 || c.Port > 65535 {
		return nil, fmt.Errorf("vector_store qdrant: port %d: want 1 to 65535: %w", c.Port, ports.ErrInvalidArgument)
	}
	if !prefixPattern.MatchString(c.CollectionPrefix) {
		return nil, fmt.Errorf("vector_store qdrant: collection_prefix %q: want up to 64 of A-Z a-z 0-9 _ -: %w",
			c.CollectionPrefix, ports.ErrInvalidArgument)
	}
	client, err := qdrant.NewClient(&qdrant.Config{
		Host:   c.Host,
		Port:   c.Port,
		APIKey: c.APIKey,
		UseTLS: c.TLS,
		// The check is one more call at start and refuses servers the
		// client was not released against; the calls used here are old.
		SkipCompatibilityCheck: true,
	})
	if err != nil {
		return nil, fmt.Errorf("vector_store qdrant: connect to %s: %w", c.Host, err)
	}
	return &Store{client: client, prefix: c.CollectionPrefix}, nil
}

// Close closes the connections.
func (s *Store) Close() error { return s.client.Close() }

// translate maps Qdrant's gRPC status codes onto the port's errors.
func translate(err error, what string) error {
	switch status.Code(err) {
	case codes.NotFound:
		return fmt.Errorf("%s: %w: %v", what, ports.ErrNotFound, err)
	case codes.InvalidArgument:
		return fmt.Errorf("%s: %w: %v", what, ports.ErrInvalidArgument, err)
	case codes.AlreadyExists:
		return fmt.Errorf("%s: %w: %v", what, ports.ErrConflict, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

func metricOf(d qdrant.Distance) ports.Metric {
	switch d {
	case qdrant.Distance_Cosine:
		return ports.MetricCosine
	case qdrant.Distance_Dot:
		return ports.MetricDot
	case qdrant.Distance_Euclid:
		return ports.MetricEuclid
	}
	return ports.Metric(strings.ToLower(d.String()))
}

func distanceOf(m ports.Metric) qdrant.Distance {
	switch m {
	case ports.MetricDot:
		return qdrant.Distance_Dot
	case ports.MetricEuclid:
		return qdrant.Distance_Euclid
	}
	return qdrant.Distance_Cosine
}

// info reads a collection's settings, or ErrNotFound.
func (s *Store) info(ctx context.Context, name string) (int, ports.Metric, error) {
	ci, err := s.client.GetCollectionInfo(ctx, s.prefix+name)
	if err != nil {
		return 0, "", translate(err, fmt.Sprintf("collection %q", name))
	}
	p := ci.GetConfig().GetParams().GetVectorsConfig().GetParams()
	if p == nil {
		return 0, "", fmt.Errorf("collection %q has named vectors, which this adapter does not use: %w", name, ports.ErrConflict)
	}
	return int(p.GetSize()), metricOf(p.GetDistance()), nil
}

func (s *Store) CreateCollection(ctx context.Context, name string, dimension int, metric ports.Metric) error {
	if err := vecutil.CheckCollection(name, dimension, metric); err != nil {
		return err
	}
	same := func() error {
		dim, m, err := s.info(ctx, name)
		if err != nil {
			return err
		}
		if dim != dimension || m != metric {
			return fmt.Errorf("collection %q exists with dimension %d and metric %s, not %d and %s: %w",
				name, dim, m, dimension, metric, ports.ErrConflict)
		}
		return nil
	}
	if err := same(); !errors.Is(err, ports.ErrNotFound) {
		return err
	}
	err := s.client.CreateCollection(ctx, &qdrant.CreateCollection{
		CollectionName: s.prefix + name,
		VectorsConfig:  qdrant.NewVectorsConfig(&qdrant.VectorParams{Size: uint64(dimension), Distance: distanceOf(metric)}),
	})
	if err == nil {
		return nil
	}
	// Another engine may have created it between the read and the create.
	if err := same(); err == nil || errors.Is(err, ports.ErrConflict) {
		return err
	}
	return translate(err, fmt.Sprintf("create collection %q", name))
}

func (s *Store) DeleteCollection(ctx context.Context, name string) error {
	if _, _, err := s.info(ctx, name); err != nil {
		return err
	}
	if err := s.client.DeleteCollection(ctx, s.prefix+name); err != nil {
		return translate(err, fmt.Sprintf("delete collection %q", name))
	}
	return nil
}

func (s *Store) Collections(ctx context.Context) ([]ports.VectorCollection, error) {
	names, err := s.client.ListCollections(ctx)
	if err != nil {
		return nil, translate(err, "list collections")
	}
	out := []ports.VectorCollection{}
	for _, full := range names {
		name, ok := strings.CutPrefix(full, s.prefix)
		if !ok || vecutil.CheckName(name) != nil {
			continue
		}
		dim, m, err := s.info(ctx, name)
		if errors.Is(err, ports.ErrNotFound) {
			continue // deleted since the list
		}
		if err != nil {
			return nil, err
		}
		out = append(out, ports.VectorCollection{Name: name, Dimension: dim, Metric: m})
	}
	slices.SortFunc(out, func(a, b ports.VectorCollection) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// pointID maps a string id to a stable UUID (version 5, SHA-1 in the URL
// namespace), which Qdrant accepts as a point id.
func pointID(id string) *qdrant.PointId {
	// RFC 9562's URL namespace, 6ba7b811-9dad-11d1-80b4-00c04fd430c8.
	ns := []byte{0x6b, 0xa7, 0xb8, 0x11, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8}
	h := sha1.New()
	h.Write(ns)
	h.Write([]byte(id))
	u := h.Sum(nil)[:16]
	u[6] = u[6]&0x0f | 0x50
	u[8] = u[8]&0x3f | 0x80
	return qdrant.NewIDUUID(fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16]))
}

// toValue converts a normalised JSON value. Whole numbers go as integers,
// so that an equality filter on them can use Qdrant's integer match.
func toValue(v any) (*qdrant.Value, error) {
	switch x := v.(type) {
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
			return qdrant.NewValueInt(int64(x)), nil
		}
		return qdrant.NewValueDouble(x), nil
	case map[string]any:
		fields := make(map[string]*qdrant.Value, len(x))
		for k, e := range x {
			fv, err := toValue(e)
			if err != nil {
				return nil, err
			}
			fields[k] = fv
		}
		return qdrant.NewValueFromFields(fields), nil
	case []any:
		items := make([]*qdrant.Value, len(x))
		for i, e := range x {
			iv, err := toValue(e)
			if err != nil {
				return nil, err
			}
			items[i] = iv
		}
		return qdrant.NewValueFromList(items...), nil
	}
	return qdrant.NewValue(v)
}

// fromValue converts back, numbers as float64 as after a JSON round trip.
func fromValue(v *qdrant.Value) any {
	switch k := v.GetKind().(type) {
	case *qdrant.Value_BoolValue:
		return k.BoolValue
	case *qdrant.Value_IntegerValue:
		return float64(k.IntegerValue)
	case *qdrant.Value_DoubleValue:
		return k.DoubleValue
	case *qdrant.Value_StringValue:
		return k.StringValue
	case *qdrant.Value_StructValue:
		m := make(map[string]any, len(k.StructValue.GetFields()))
		for f, e := range k.StructValue.GetFields() {
			m[f] = fromValue(e)
		}
		return m
	case *qdrant.Value_ListValue:
		l := make([]any, len(k.ListValue.GetValues()))
		for i, e := range k.ListValue.GetValues() {
			l[i] = fromValue(e)
		}
		return l
	}
	return nil
}

func toPayload(id string, p map[string]any) (map[string]*qdrant.Value, error) {
	n, err := vecutil.NormalizePayload(p)
	if err != nil {
		return nil, err
	}
	if _, ok := n[idKey]; ok {
		return nil, fmt.Errorf("payload field %q is reserved for the id: %w", idKey, ports.ErrInvalidArgument)
	}
	out := make(map[string]*qdrant.Value, len(n)+1)
	for k, v := range n {
		if out[k], err = toValue(v); err != nil {
			return nil, fmt.Errorf("payload field %q: %v: %w", k, err, ports.ErrInvalidArgument)
		}
	}
	out[idKey] = qdrant.NewValueString(id)
	return out, nil
}

// fromPoint rebuilds a vector from a stored point.
func fromPoint(payload map[string]*qdrant.Value, vectors *qdrant.VectorsOutput) ports.Vector {
	v := ports.Vector{ID: payload[idKey].GetStringValue()}
	if len(payload) > 1 {
		v.Payload = make(map[string]any, len(payload)-1)
		for k, e := range payload {
			if k != idKey {
				v.Payload[k] = fromValue(e)
			}
		}
	}
	if d := vectors.GetVector().GetDenseVector(); d != nil {
		v.Values = d.GetData()
	}
	return v
}

func (s *Store) Upsert(ctx context.Context, name string, vectors []ports.Vector) error {
	dim, _, err := s.info(ctx, name)
	if err != nil {
		return err
	}
	if err := vecutil.CheckVectors(name, dim, vectors); err != nil {
		return err
	}
	if len(vectors) == 0 {
		return nil
	}
	points := make([]*qdrant.PointStruct, len(vectors))
	for i, v := range vectors {
		p, err := toPayload(v.ID, v.Payload)
		if err != nil {
			return fmt.Errorf("upsert %q into %q: %w", v.ID, name, err)
		}
		points[i] = &qdrant.PointStruct{Id: pointID(v.ID), Vectors: qdrant.NewVectorsDense(v.Values), Payload: p}
	}
	_, err = s.client.Upsert(ctx, &qdrant.UpsertPoints{CollectionName: s.prefix + name, Wait: qdrant.PtrOf(true), Points: points})
	if err != nil {
		return translate(err, fmt.Sprintf("upsert %d vectors into %q", len(points), name))
	}
	return nil
}

// filterOf turns an equality filter into Qdrant conditions. Qdrant matches
// a field holding a list when any element matches, and cannot match whole
// objects or lists, which are refused.
func filterOf(f vecutil.Filter) (*qdrant.Filter, error) {
	if len(f) == 0 {
		return nil, nil
	}
	var must []*qdrant.Condition
	for k, v := range f {
		switch x := v.(type) {
		case nil:
			must = append(must, qdrant.NewIsNull(k))
		case bool:
			must = append(must, qdrant.NewMatchBool(k, x))
		case string:
			must = append(must, qdrant.NewMatchKeyword(k, x))
		case float64:
			if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
				must = append(must, qdrant.NewMatchInt(k, int64(x)))
			} else {
				must = append(must, qdrant.NewRange(k, &qdrant.Range{Gte: qdrant.PtrOf(x), Lte: qdrant.PtrOf(x)}))
			}
		default:
			return nil, fmt.Errorf("filter on %q: Qdrant matches strings, numbers, booleans and null, not %T: %w", k, v, ports.ErrInvalidArgument)
		}
	}
	return &qdrant.Filter{Must: must}, nil
}

func (s *Store) Search(ctx context.Context, name string, query []float32, k int, filter map[string]any) ([]ports.ScoredVector, error) {
	f, err := vecutil.NewFilter(filter)
	if err != nil {
		return nil, fmt.Errorf("search %q: %w", name, err)
	}
	qf, err := filterOf(f)
	if err != nil {
		return nil, fmt.Errorf("search %q: %w", name, err)
	}
	dim, _, err := s.info(ctx, name)
	if err != nil {
		return nil, err
	}
	if err := vecutil.CheckSearch(name, dim, query, k); err != nil {
		return nil, err
	}
	res, err := s.client.Query(ctx, &qdrant.QueryPoints{
		CollectionName: s.prefix + name,
		Query:          qdrant.NewQueryDense(query),
		Filter:         qf,
		Limit:          qdrant.PtrOf(uint64(k)),
		WithPayload:    qdrant.NewWithPayload(true),
		WithVectors:    qdrant.NewWithVectors(true),
	})
	if err != nil {
		return nil, translate(err, fmt.Sprintf("search %q", name))
	}
	out := make([]ports.ScoredVector, len(res))
	for i, p := range res {
		out[i] = ports.ScoredVector{Vector: fromPoint(p.GetPayload(), p.GetVectors()), Score: float64(p.GetScore())}
	}
	return out, nil
}

func (s *Store) Get(ctx context.Context, name, id string) (ports.Vector, error) {
	if err := vecutil.CheckID(name, id); err != nil {
		return ports.Vector{}, err
	}
	if _, _, err := s.info(ctx, name); err != nil {
		return ports.Vector{}, err
	}
	res, err := s.client.Get(ctx, &qdrant.GetPoints{
		CollectionName: s.prefix + name,
		Ids:            []*qdrant.PointId{pointID(id)},
		WithPayload:    qdrant.NewWithPayload(true),
		WithVectors:    qdrant.NewWithVectors(true),
	})
	if err != nil {
		return ports.Vector{}, translate(err, fmt.Sprintf("get %q from %q", id, name))
	}
	if len(res) == 0 {
		return ports.Vector{}, fmt.Errorf("vector %q in %q: %w", id, name, ports.ErrNotFound)
	}
	return fromPoint(res[0].GetPayload(), res[0].GetVectors()), nil
}

func (s *Store) Delete(ctx context.Context, name string, ids []string) error {
	if err := vecutil.CheckIDs(name, ids); err != nil {
		return err
	}
	if _, _, err := s.info(ctx, name); err != nil {
		return err
	}
	if len(ids) == 0 {
		return nil
	}
	pids := make([]*qdrant.PointId, len(ids))
	for i, id := range ids {
		pids[i] = pointID(id)
	}
	_, err := s.client.Delete(ctx, &qdrant.DeletePoints{
		CollectionName: s.prefix + name,
		Wait:           qdrant.PtrOf(true),
		Points:         qdrant.NewPointsSelectorIDs(pids),
	})
	if err != nil {
		return translate(err, fmt.Sprintf("delete %d vectors from %q", len(ids), name))
	}
	return nil
}

func (s *Store) Count(ctx context.Context, name string) (int, error) {
	n, err := s.client.Count(ctx, &qdrant.CountPoints{CollectionName: s.prefix + name, Exact: qdrant.PtrOf(true)})
	if err != nil {
		return 0, translate(err, fmt.Sprintf("count %q", name))
	}
	return int(n), nil
}
