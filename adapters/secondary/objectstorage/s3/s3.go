// Package s3 stores objects in a bucket of any S3-compatible service.
//
// Objects stream: a Put reads at most one part (8 MiB) ahead, sending a
// small object in one request and a larger one as a multipart upload, so
// an object of unknown length is never held whole in memory. Conditional
// Puts use the If-None-Match and If-Match headers on the request that
// publishes the object (PutObject or CompleteMultipartUpload), so the
// service decides atomically which writer wins. That request is not sent
// again once it may have reached the service: its second sending would fail
// the condition the first one met, and report a write that happened as a
// lost race. Nor is a multipart upload's completion, conditions or none (a
// second sending names an upload the first completed, which S3 answers
// NoSuchUpload), nor a Delete's (a second finds no object at the ETag the
// first removed). A lost answer to any of them is the call's error, of
// unknown outcome. The other requests are sent again as the SDK sees fit:
// reads, an unconditional PutObject and an upload's parts do the same
// thing twice, and a CreateMultipartUpload sent twice only leaves an empty
// upload behind (only a bucket's lifecycle rule for incomplete uploads
// removes it), which failing the Put instead would leave as well. A
// refusal the service sends back because it is busy (503 Slow Down, 429),
// because the request's body did not come in time (400 RequestTimeout) or
// because it came short or changed on the way (400 IncompleteBody,
// BadDigest, XAmzContentSHA256Mismatch) is sent again for every write,
// since the request was not done, and one that keeps coming back fails as
// the service's error, never as the caller's invalid argument; a 503
// without the service's request id, which a proxy may send after the
// service did the request, is not.
//
// Keys with ".", ".." or empty segments ("../x", "a//b", "x/") are refused:
// S3 servers that keep objects as files would store "d/../y" over "y".
// So are keys with a segment such a server keeps for its own files
// (versitygw's ".sgwtmp", which holds uploads in progress and the parts of
// multipart uploads): an object there is never listed, so the bucket can
// no longer be emptied, and one at ".sgwtmp/multipart/<sha256 of a key>"
// fails every multipart Put of that key, whoever sends it. A Put also
// refuses a key holding a character XML cannot carry, which a listing
// would name wrongly (checkListable), and one with a segment longer than a
// file name (checkSegments).
//
// How far each call is one step is the service's to say. Delete removes
// the object at the ETag it read (If-Match) and answers ErrNotFound when
// the service refuses that for a key already gone; a Get returns the
// content and ETag the service pairs. versitygw does neither in one step:
// on it two racing Deletes can both succeed, and a Get racing a Put can
// pair one version's ETag with the other's content. It also refuses now
// and then a Put racing a Delete of another key in the same directory, as
// if the key were nested in another object's path; a Put of one request
// is sent again then (nesting). For the same reason the store is no
// ports.ConditionalObjectDeleter, though S3 takes If-Match on a
// DeleteObject: versitygw compares the ETag and removes the file in two
// steps, so a Put landing between them is removed (in one race in a few
// hundred), and it answers success for a key already gone. A Put onto a
// key that is a folder of others ("a" beside "a/b") is a conflict, of one
// request or of parts: versitygw answers the completion of a multipart
// upload there as an internal error, which the store looks into (folder).
//
// A completion the service fails (500), which may or may not have been
// done, is looked into: if its upload is still whole it published nothing
// and is sent again, conditions and all; if not, the Put fails saying the
// outcome is unknown (uploadWhole). A multipart Put whose upload someone
// else aborts under it (a lifecycle rule for incomplete uploads, a
// cleanup) fails saying so, having stored nothing (translateUpload).
// versitygw answers the completion of such an upload as done when the key
// already holds an object, whatever it holds; the store cannot tell that
// answer from a true one.
//
// A write the store knows was not done fails as ports.ErrNotDone, which
// tells the caller it may send it again: a Put or a Delete whose every
// sending the service refused or none reached (sendings), a multipart Put
// whose upload failed before its completion was sent (unstored), or was
// aborted, and one whose completion the service failed three times, each
// leaving the upload whole. A write that one of its sendings may have
// done (its answer lost, or a 500 the store cannot look behind) never
// does.
package s3

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/abi-engine/engine/adapters/secondary/internal/objread"
	"github.com/abi-engine/engine/adapters/secondary/objectstorage/internal/objkey"
	"github.com/abi-engine/engine/ports"
	"github.com/abi-engine/engine/storecheck"
)

const (
	// PartSize is what a Put holds in memory at most, and the size of each
	// part of a multipart upload (S3 wants at least 5 MiB but the last).
	PartSize = 8 << 20
	// maxParts is S3's limit of parts per upload, which caps an object at
	// about 78 GiB with PartSize parts.
	maxParts = 10_000
	// probeSize is read before anything else, so a small object costs a
	// small buffer rather than a whole part.
	probeSize = 64 << 10
	// abortTimeout bounds the cleanup of a failed multipart upload, which
	// runs even when the Put's own context has ended.
	abortTimeout = 30 * time.Second
	// closeWait is how long Close waits for the cleanups still running
	// before it ends them: within the time an engine leaves a backend's
	// close, which has no bound of its own.
	closeWait = 5 * time.Second
	// defaultRegion is used when the config names none; most S3-compatible
	// services accept any region.
	defaultRegion = "us-east-1"
)

// Config is the s3 adapter's block under services.object_storage.config.
type Config struct {
	// Endpoint is the service's URL, e.g. http://127.0.0.1:17070; empty
	// means AWS.
	Endpoint string `yaml:"endpoint"`
	// Bucket must exist; the adapter never creates buckets.
	Bucket    string `yaml:"bucket"`
	Region    string `yaml:"region"`
	AccessKey string `yaml:"access_key"`
	SecretKey string `yaml:"secret_key" secret:"true"`
	// PathStyle addresses the bucket in the path rather than the host name,
	// as most S3-compatible services need.
	PathStyle bool `yaml:"path_style"`
}

// LocalStorage implements ports.StorageConfig: every engine reaches the
// bucket over the network.
func (Config) LocalStorage() string { return "" }

// Check refuses, without connecting, the settings Open cannot work with,
// naming each under prefix: the registry calls it when the configuration
// is built, before anything opens.
func (c Config) Check(prefix string) error {
	if c.Bucket == "" {
		return fmt.Errorf("%s.bucket is empty: %w", prefix, ports.ErrInvalidArgument)
	}
	if (c.AccessKey == "") != (c.SecretKey == "") {
		return fmt.Errorf("%s.access_key and secret_key must be set together: %w", prefix, ports.ErrInvalidArgument)
	}
	return nil
}

// Store is a bucket seen as a ports.ObjectStorage.
type Store struct {
	client *s3.Client
	bucket string
	// cleanups are the aborts of failed uploads still running (abort),
	// which Close waits for; closing ends those it has waited closeWait
	// for. closed, under mu, tells that Close has begun, after which an
	// abort runs in its Put.
	cleanups sync.WaitGroup
	closing  context.Context
	end      context.CancelFunc
	mu       sync.Mutex
	closed   bool
	// transport holds the store's connections, so that Close can release
	// them: the SDK's own client offers no way to.
	transport *http.Transport
}

var _ ports.ObjectStorage = (*Store)(nil)

// Open checks the config, then that the bucket exists and answers.
func Open(ctx context.Context, c Config) (*Store, error) {
	if c.Bucket == "" {
		return nil, fmt.Errorf("object_storage.config.bucket is empty: %w", ports.ErrInvalidArgument)
	}
	if (c.AccessKey == "") != (c.SecretKey == "") {
		return nil, fmt.Errorf("object_storage.config.access_key and secret_key must be set together: %w", ports.ErrInvalidArgument)
	}
	region := c.Region
	if region == "" {
		region = defaultRegion
	}
	opts := s3.Options{
		Region:       region,
		UsePathStyle: c.PathStyle,
		// Checksums only where S3 requires them: many S3-compatible
		// services reject the trailing checksums newer SDKs send by default.
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	}
	if c.Endpoint != "" {
		opts.BaseEndpoint = aws.String(c.Endpoint)
	}
	if c.AccessKey != "" {
		opts.Credentials = credentials.NewStaticCredentialsProvider(c.AccessKey, c.SecretKey, "")
	} else {
		opts.Credentials = aws.AnonymousCredentials{}
	}
	// The SDK's default retryer, which also sends again a request whose
	// body arrived damaged (damagedBody).
	opts.Retryer = retry.NewStandard(func(o *retry.StandardOptions) {
		o.Retryables = append(o.Retryables, retry.RetryableErrorCode{Codes: damagedBody})
	})
	// The SDK's default transport, but the store's own to close.
	transport := awshttp.NewBuildableClient().GetTransport()
	opts.HTTPClient = &http.Client{Transport: transport, CheckRedirect: sameMethodRedirect}
	s := &Store{client: s3.New(opts), bucket: c.Bucket, transport: transport}
	s.closing, s.end = context.WithCancel(context.Background())
	if _, err := s.client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(c.Bucket)}); err != nil {
		s.Close()
		return nil, fmt.Errorf("object_storage.config.bucket %q at %q: %w", c.Bucket, c.Endpoint, translate(err))
	}
	return s, nil
}

// maxRedirects is how many redirects a request follows, as net/http's
// default client does.
const maxRedirects = 10

// sameMethodRedirect follows only the redirects that keep the method and
// the body (307 and 308), as the SDK's own client does; any other is the
// answer, which the SDK turns into an error.
func sameMethodRedirect(r *http.Request, via []*http.Request) error {
	switch r.Response.StatusCode {
	case http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		if len(via) >= maxRedirects {
			return fmt.Errorf("stopped after %d redirects", maxRedirects)
		}
		return nil
	}
	return http.ErrUseLastResponse
}

// Close waits for the cleanups of failed uploads still running, for at
// most closeWait, and ends those left, so that none outlives the store;
// then it releases the store's idle connections, and one a call still
// holds is left to idle out once the call ends. Closing twice is harmless.
func (s *Store) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	waited := make(chan struct{})
	go func() {
		s.cleanups.Wait()
		close(waited)
	}()
	wait := time.NewTimer(closeWait)
	select {
	case <-waited:
	case <-wait.C:
		s.end()
		<-waited
	}
	wait.Stop()
	s.end()
	s.transport.CloseIdleConnections()
	return nil
}

// translate turns the service's errors into the ports' sentinels. A
// missing bucket is none of them: the store is gone, not an object, and a
// caller told "not found" would look for it or write it again. Only a HEAD
// (Stat) cannot tell the two apart, as its answer has no body to name the
// error. Nor is a 400 the caller's invalid argument unless its code names
// something the caller gave: the store checks the caller's keys, content
// type, conditions and ranges before it sends them, and builds the rest
// of each request itself, so any other 400 (InvalidPart, EntityTooSmall,
// MalformedXML, InvalidArgument, which versitygw gives only for the
// request's make, as its part numbers or its signature) is the store's or
// the service's fault, the engine's error. A Stat's 400 comes with no code
// (its answer has no body) and refuses the one thing of the caller's it
// carries, the key.
func translate(err error) error {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode() {
		case "NoSuchBucket":
			return err
		case "RequestTimeout":
			// The request's body did not reach the service in time: a
			// 400, but nothing the caller sent was wrong (refused).
			return err
		case "IncompleteBody", "BadDigest", "XAmzContentSHA256Mismatch":
			// The body the store sent arrived short or changed: a 400,
			// but the body is the store's, not the caller's (damagedBody).
			return err
		case "NoSuchKey", "NotFound", "NoSuchUpload":
			return fmt.Errorf("%w: %w", ports.ErrNotFound, err)
		case "PreconditionFailed", "ConditionalRequestConflict",
			// S3 servers that keep objects as files cannot hold "a" beside "a/b".
			"ExistingObjectIsDirectory", "ObjectParentIsFile":
			return fmt.Errorf("%w: %w", ports.ErrConflict, err)
		case "InvalidRange", "KeyTooLongError":
			// The caller's offset past the object's end, the caller's
			// key longer than the service takes.
			return fmt.Errorf("%w: %w", ports.ErrInvalidArgument, err)
		case "BadRequest":
			// A 400 with no code of its own: the answer to a HEAD (Stat),
			// which has no body to name the error. A Stat carries
			// nothing of the caller's but the key, so the service
			// refused the key, as one keeping files refuses a name
			// segment past 255 bytes, which the store does not check.
			return fmt.Errorf("%w: %w", ports.ErrInvalidArgument, err)
		case "EntityTooLarge":
			return fmt.Errorf("%w: %w", ports.ErrTooLarge, err)
		case "InsufficientStorage", "XMinioStorageFull", "QuotaExceeded":
			// No room for the write, on the server's disk (versitygw,
			// MinIO) or under a quota (versitygw, Ceph): it wrote nothing.
			return fmt.Errorf("%w: %w", ports.ErrStorageFull, err)
		}
	}
	var respErr *smithyhttp.ResponseError
	if errors.As(err, &respErr) {
		switch respErr.HTTPStatusCode() {
		case http.StatusNotFound:
			return fmt.Errorf("%w: %w", ports.ErrNotFound, err)
		case http.StatusPreconditionFailed:
			return fmt.Errorf("%w: %w", ports.ErrConflict, err)
		case http.StatusRequestedRangeNotSatisfiable:
			return fmt.Errorf("%w: %w", ports.ErrInvalidArgument, err)
		case http.StatusInsufficientStorage:
			return fmt.Errorf("%w: %w", ports.ErrStorageFull, err)
		}
	}
	return err
}

// damagedBody are the codes S3 refuses a request with when its body did
// not arrive as the store sent it: shorter than its length
// (IncompleteBody), or unlike the digest sent with it (BadDigest for
// Content-MD5, XAmzContentSHA256Mismatch for the signed SHA-256). The body
// is a buffer of the store's, which it read the caller's stream into, so
// such a refusal says the bytes were damaged on the way (a connection, a
// proxy), never that the caller's input was wrong; and the service did
// nothing with the request, which may be sent again, the buffer unchanged,
// conditions or none (refused).
var damagedBody = map[string]struct{}{
	"IncompleteBody":            {},
	"BadDigest":                 {},
	"XAmzContentSHA256Mismatch": {},
}

// translatePut is translate for a conditional write, where a missing key
// means the condition failed.
func translatePut(err error, opts ports.PutObjectOptions) error {
	err = translate(err)
	if opts.IfMatch != "" && errors.Is(err, ports.ErrNotFound) {
		return fmt.Errorf("%w: %w", ports.ErrConflict, err)
	}
	return err
}

// etag drops the quotes S3 puts around ETags, so callers see a plain token.
func etag(p *string) string { return strings.Trim(aws.ToString(p), `"`) }

func quote(etag string) *string { return aws.String(`"` + etag + `"`) }

// conditions returns the If-None-Match and If-Match headers of a Put, and
// the options of the request that carries them (sentOnce, when there are
// any).
func conditions(opts ports.PutObjectOptions) (ifNoneMatch, ifMatch *string, once []func(*s3.Options)) {
	if opts.IfAbsent {
		ifNoneMatch = aws.String("*")
	}
	if opts.IfMatch != "" {
		ifMatch = quote(opts.IfMatch)
	}
	if ifNoneMatch != nil || ifMatch != nil {
		once = []func(*s3.Options){sentOnce}
	}
	return ifNoneMatch, ifMatch, once
}

// sentOnce keeps the SDK from sending a write again once it may have
// reached the service. The SDK sends a request again when its answer does
// not arrive (a connection reset or closed on the way back); the first may
// have been done, and the second then finds what the first did: a put if
// absent finds the object it stored, a put if match the ETag it wrote, a
// completion no upload, a Delete no object at its ETag. The caller would be
// told the write did not happen. Only a request that never left, whose
// connection could not be made, or one the service answered it would not
// take for now (see refused) is sent again; any other failure is the
// write's error, whose outcome is unknown.
func sentOnce(o *s3.Options) {
	if o.Retryer != nil {
		o.Retryer = unsent{o.Retryer}
	}
}

// unsent is a retryer that retries only what was never done: a request
// that was never sent, or one the service refused as too busy.
type unsent struct{ aws.Retryer }

func (u unsent) IsErrorRetryable(err error) bool {
	return notDone(err) && u.Retryer.IsErrorRetryable(err)
}

// notDone reports whether a request that failed with err was not done: it
// never left, its connection not made, or the service refused it for now
// (refused).
func notDone(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial" || refused(err)
}

// sendings follows the sendings of one write request, the first and the
// SDK's again, so that a write that failed can tell whether any of them
// may have been done: the SDK sends an unconditional write again after a
// lost answer or a 500, and the last sending's refusal then says nothing
// of the ones before.
type sendings struct{ maybeDone bool }

// follow is the request's option that has s see every failed sending. It
// goes after sentOnce, whose retryer asks the one under it only of the
// failures it would send again.
func (s *sendings) follow(o *s3.Options) {
	if o.Retryer != nil {
		o.Retryer = following{o.Retryer, s}
	}
}

// following is a retryer that tells its sendings of each failure.
type following struct {
	aws.Retryer
	s *sendings
}

func (f following) IsErrorRetryable(err error) bool {
	if !notDone(err) {
		f.s.maybeDone = true
	}
	return f.Retryer.IsErrorRetryable(err)
}

// undone reports whether the write that failed with err was done by none
// of its sendings: each failed as not done, the last with err.
func (s *sendings) undone(err error) bool { return !s.maybeDone && notDone(err) }

// transient reports whether err, a request's, is a failure that passes:
// one the SDK sends again and gave up on after its attempts (a service
// error, a lost connection, a refusal), or one of a request never sent or
// refused. A multipart Put that fails so before its completion is sent
// stored nothing, and may store if sent again later (unstored).
func transient(err error) bool {
	var attempts *retry.MaxAttemptsError
	var quota ratelimit.QuotaExceededError
	return errors.As(err, &attempts) || errors.As(err, &quota) || notDone(err)
}

// refused reports whether the service answered err to say it did not take
// the request for now: 429, a throttle code (S3's Slow Down), a 503 the
// service itself sent, which carries its request id, RequestTimeout (400),
// S3's answer to a request whose body did not come in time, or one of
// damagedBody (400), its answer to one whose body came short or changed.
// Such a request was not done, and a busy service or a slow or damaging
// connection is no reason to fail a conditional write that any other write
// would wait out. A 500, or a 502, 503 or 504 from a
// proxy on the way (Envoy answers 503 when the server's connection is
// reset before its answer's headers), may come after the write was done:
// those are not sent again.
func refused(err error) bool {
	var resp *smithyhttp.ResponseError
	if !errors.As(err, &resp) {
		return false
	}
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		if _, throttle := retry.DefaultThrottleErrorCodes[apiErr.ErrorCode()]; throttle {
			return true
		}
		if apiErr.ErrorCode() == "RequestTimeout" {
			return true
		}
		if _, damaged := damagedBody[apiErr.ErrorCode()]; damaged {
			return true
		}
	}
	var service interface{ ServiceRequestID() string }
	switch resp.HTTPStatusCode() {
	case http.StatusTooManyRequests:
		return true
	case http.StatusServiceUnavailable:
		return errors.As(err, &service) && service.ServiceRequestID() != ""
	}
	return false
}

func contentType(opts ports.PutObjectOptions) string {
	if opts.ContentType == "" {
		return objkey.DefaultContentType
	}
	return opts.ContentType
}

// reservedSegments are key segments that S3 servers keeping objects as
// files use for their own files: versitygw keeps uploads in progress and
// the parts of multipart uploads under ".sgwtmp".
var reservedSegments = []string{".sgwtmp"}

// checkKey is objkey.CheckPathClean, and refuses the reserved segments, so
// that no key reaches the server's own files or another key's upload.
func checkKey(key string) error {
	if err := objkey.CheckPathClean(key); err != nil {
		return err
	}
	for seg := range strings.SplitSeq(key, "/") {
		if slices.Contains(reservedSegments, seg) {
			return fmt.Errorf("object key %q has a %q segment, which an S3 server keeping files keeps for its own: %w", key, seg, ports.ErrInvalidArgument)
		}
	}
	return nil
}

// checkListable refuses a key holding a character XML 1.0 cannot carry (a
// control character other than tab, line feed and carriage return, U+FFFE,
// U+FFFF). A listing is XML: versitygw writes such a character as U+FFFD,
// so the object would be listed under a key that does not exist and out of
// its order, and a cursor made of that key would page forever or skip
// keys; S3 answers it only to a client that asks for URL-encoded keys, which
// versitygw ignores. Only a Put refuses it: an object stored under such a
// key before can still be read and deleted.
func checkListable(key string) error {
	for i, r := range key {
		if r == '\t' || r == '\n' || r == '\r' || r >= 0x20 && r != 0xfffe && r != 0xffff {
			continue
		}
		return fmt.Errorf("object key %q holds %U at byte %d, which an S3 listing cannot carry: %w", key, r, i, ports.ErrInvalidArgument)
	}
	return nil
}

// maxSegment is the longest segment of a key a Put takes: S3 servers that
// keep objects as files make each segment a file or directory name, which
// holds 255 bytes at most.
const maxSegment = 255

// checkSegments refuses a key with a segment longer than maxSegment. Sent,
// versitygw answers such a Put 409 or 500 by its size, and leaves the
// directories it made for the key's first segments, which the S3 API
// neither lists nor deletes: after "p/<256 bytes>", a Put of "p" fails for
// good. Only a Put refuses it, as checkListable's keys.
func checkSegments(key string) error {
	for seg := range strings.SplitSeq(key, "/") {
		if len(seg) > maxSegment {
			return fmt.Errorf("object key %.40q… has a segment of %d bytes, longer than the %d an S3 server keeping files takes: %w", key, len(seg), maxSegment, ports.ErrInvalidArgument)
		}
	}
	return nil
}

// Put implements ports.ObjectStorage.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, opts ports.PutObjectOptions) (ports.ObjectInfo, error) {
	if err := checkKey(key); err != nil {
		return ports.ObjectInfo{}, err
	}
	if err := objkey.CheckPut(key, opts); err != nil {
		return ports.ObjectInfo{}, err
	}
	if err := checkListable(key); err != nil {
		return ports.ObjectInfo{}, err
	}
	if err := checkSegments(key); err != nil {
		return ports.ObjectInfo{}, err
	}
	probe := make([]byte, probeSize)
	n, err := objread.Full(r, probe)
	if end(err) {
		return s.putOnce(ctx, key, probe[:n], opts)
	}
	if err != nil {
		return ports.ObjectInfo{}, fmt.Errorf("put %q: read: %w", key, err)
	}
	part := make([]byte, PartSize)
	copy(part, probe)
	m, err := objread.Full(r, part[n:])
	if end(err) {
		return s.putOnce(ctx, key, part[:n+m], opts)
	}
	if err != nil {
		return ports.ObjectInfo{}, fmt.Errorf("put %q: read: %w", key, err)
	}
	return s.putParts(ctx, key, part, r, opts)
}

// end reports whether objread.Full stopped at the end of the reader: a
// reader that fails, with io.ErrUnexpectedEOF too, was cut short.
func end(err error) bool {
	return errors.Is(err, io.EOF)
}

// putOnce stores an object that fits in one request.
func (s *Store) putOnce(ctx context.Context, key string, data []byte, opts ports.PutObjectOptions) (ports.ObjectInfo, error) {
	ifNoneMatch, ifMatch, once := conditions(opts)
	for try := 1; ; try++ {
		var sent sendings
		out, err := s.client.PutObject(ctx, &s3.PutObjectInput{
			Bucket:        aws.String(s.bucket),
			Key:           aws.String(key),
			Body:          bytes.NewReader(data),
			ContentLength: aws.Int64(int64(len(data))),
			ContentType:   aws.String(contentType(opts)),
			IfNoneMatch:   ifNoneMatch,
			IfMatch:       ifMatch,
		}, append(once, sent.follow)...)
		if err != nil && try < nestingTries && nesting(err) && !s.inTheWay(ctx, key) {
			continue
		}
		if err != nil && sent.undone(err) {
			return ports.ObjectInfo{}, fmt.Errorf("put %q: the service refused each sending, or none reached it; nothing was stored: %w: %w", key, ports.ErrNotDone, err)
		}
		if err != nil {
			return ports.ObjectInfo{}, fmt.Errorf("put %q: %w", key, translatePut(err, opts))
		}
		return s.written(ctx, key, etag(out.ETag), int64(len(data)), opts), nil
	}
}

// nestingTries is how many times putOnce sends a Put that the service
// refused as nested in, or over, another object's path, when no object is
// in its way (inTheWay).
const nestingTries = 5

// inTheWay reports whether another object's path truly runs into key's: a
// key lies under key+"/", or an object is stored at one of key's parents
// ("a" of "a/b"). A Put refused as nested then fails at once, as sending
// it again cannot store it, body and all; otherwise the refusal came from
// a race with a Delete (nesting), and the Put is sent again. A question
// that fails answers false, so the Put is sent again as before.
func (s *Store) inTheWay(ctx context.Context, key string) bool {
	if _, ok := s.under(ctx, key); ok {
		return true
	}
	for i := range len(key) {
		if key[i] != '/' {
			continue
		}
		if _, err := s.Stat(ctx, key[:i]); err == nil {
			return true
		}
	}
	return false
}

// under returns a key stored under key+"/", if there is one.
func (s *Store) under(ctx context.Context, key string) (string, bool) {
	out, err := s.client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{
		Bucket:  aws.String(s.bucket),
		Prefix:  aws.String(key + "/"),
		MaxKeys: aws.Int32(1),
	})
	if err != nil || len(out.Contents) == 0 {
		return "", false
	}
	return aws.ToString(out.Contents[0].Key), true
}

// nesting reports whether the service refused a write because the key's
// path runs into another object's: a key that is a directory of others
// ("a" beside "a/b"), or one under an object ("a/b" beside "a"). Such a
// refusal was done with nothing written, so the write may be sent again,
// conditions or none. versitygw gives it when the key is truly in the way,
// and also when a Delete of another key in the same directory removed the
// directory, as the last one in it, between the Put's making it and its
// writing there: sent again, the Put makes the directory anew.
func nesting(err error) bool {
	var apiErr smithy.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	code := apiErr.ErrorCode()
	return code == "ExistingObjectIsDirectory" || code == "ObjectParentIsFile"
}

// putParts streams an object as a multipart upload, reusing one part
// buffer. The conditions go on the completion, which publishes the object.
func (s *Store) putParts(ctx context.Context, key string, part []byte, r io.Reader, opts ports.PutObjectOptions) (info ports.ObjectInfo, err error) {
	created, err := s.client.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{
		Bucket:      aws.String(s.bucket),
		Key:         aws.String(key),
		ContentType: aws.String(contentType(opts)),
	})
	if err != nil {
		return ports.ObjectInfo{}, fmt.Errorf("put %q: start upload: %w", key, unstored(err, translate(err)))
	}
	defer func() {
		if err != nil {
			s.abort(ctx, key, created.UploadId)
		}
	}()
	var parts []types.CompletedPart
	var size int64
	n := len(part)
	for number := int32(1); n > 0; number++ {
		if number > maxParts {
			return ports.ObjectInfo{}, fmt.Errorf("put %q: more than %d parts of %d bytes: %w", key, maxParts, PartSize, ports.ErrTooLarge)
		}
		out, err := s.client.UploadPart(ctx, &s3.UploadPartInput{
			Bucket:        aws.String(s.bucket),
			Key:           aws.String(key),
			UploadId:      created.UploadId,
			PartNumber:    aws.Int32(number),
			Body:          bytes.NewReader(part[:n]),
			ContentLength: aws.Int64(int64(n)),
		})
		if err != nil {
			return ports.ObjectInfo{}, fmt.Errorf("put %q: part %d: %w", key, number, translateUpload(err, created.UploadId, unstored(err, translate(err))))
		}
		parts = append(parts, types.CompletedPart{ETag: out.ETag, PartNumber: aws.Int32(number)})
		size += int64(n)
		n, err = objread.Full(r, part)
		if err != nil && !end(err) {
			return ports.ObjectInfo{}, fmt.Errorf("put %q: read: %w", key, err)
		}
	}
	// The completion is sent once whatever its conditions: sent again
	// after the first published the object, it names an upload that no
	// longer exists, and S3 answers NoSuchUpload for a Put that happened.
	// Only one the service failed with the upload left whole, which
	// published nothing, is sent again (uploadWhole).
	ifNoneMatch, ifMatch, _ := conditions(opts)
	complete := &s3.CompleteMultipartUploadInput{
		Bucket:          aws.String(s.bucket),
		Key:             aws.String(key),
		UploadId:        created.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts},
		IfNoneMatch:     ifNoneMatch,
		IfMatch:         ifMatch,
	}
	for try := 1; ; try++ {
		var sent sendings
		out, err := s.client.CompleteMultipartUpload(ctx, complete, sentOnce, sent.follow)
		if err == nil {
			return s.written(ctx, key, etag(out.ETag), size, opts), nil
		}
		if inner, ok := s.folder(ctx, key, err); ok {
			return ports.ObjectInfo{}, fmt.Errorf("put %q: complete upload: the key is a folder of other keys (%q), beside which an S3 server keeping objects as files holds no object: %w: %w",
				key, inner, ports.ErrConflict, err)
		}
		if try > 1 && noSuchUpload(err) {
			// The upload was whole before this sending: the one before
			// may have completed it after all, its failure answered
			// while the service still did it.
			return ports.ObjectInfo{}, fmt.Errorf("put %q: complete upload: sent again after the service failed it, it found the upload gone: the object may or may not be stored: %w", key, err)
		}
		if sent.undone(err) {
			// No sending was done: the upload is as whole as before.
			return ports.ObjectInfo{}, fmt.Errorf("put %q: complete upload: the service refused each sending, or none reached it; nothing was stored: %w: %w", key, ports.ErrNotDone, err)
		}
		if !serviceFailed(err) {
			return ports.ObjectInfo{}, fmt.Errorf("put %q: complete upload: %w", key, translateUpload(err, created.UploadId, translatePut(err, opts)))
		}
		if !s.uploadWhole(ctx, key, created.UploadId) {
			return ports.ObjectInfo{}, fmt.Errorf("put %q: complete upload: the service failed it, and the upload is no longer there: the object may or may not be stored: %w", key, err)
		}
		if try == completionTries {
			return ports.ObjectInfo{}, fmt.Errorf("put %q: complete upload: the service failed it %d times, each leaving the upload whole: nothing was stored: %w: %w", key, try, ports.ErrNotDone, err)
		}
	}
}

// completionTries is how many times putParts sends a completion that the
// service fails each time, leaving the upload whole.
const completionTries = 3

// serviceFailed reports whether the service itself answered err as its own
// failure (500 with its request id), which says nothing of whether the
// request was done: putParts then looks at the upload (uploadWhole). A 500
// of a proxy on the way, which carries no request id of the service's, may
// come while the service still does the request, and is not looked into.
func serviceFailed(err error) bool {
	var resp *smithyhttp.ResponseError
	var service interface{ ServiceRequestID() string }
	return errors.As(err, &resp) && resp.HTTPStatusCode() == http.StatusInternalServerError &&
		errors.As(err, &service) && service.ServiceRequestID() != ""
}

// uploadWhole reports whether the multipart upload is still there to be
// completed. A completion that published the object ends its upload, on
// S3 as on versitygw, so a completion that failed and left its upload
// whole published nothing, and may be sent again, conditions and all: its
// conditions were never met by a write of its own. versitygw fails a
// completion so (500 InternalError) now and then when other Puts and
// Deletes of the key and of keys beside it race it, and the completion
// sent again stores the object. A question that fails answers false: the
// Put then fails, its outcome unknown.
func (s *Store) uploadWhole(ctx context.Context, key string, uploadID *string) bool {
	_, err := s.client.ListParts(ctx, &s3.ListPartsInput{
		Bucket:   aws.String(s.bucket),
		Key:      aws.String(key),
		UploadId: uploadID,
		MaxParts: aws.Int32(1),
	})
	return err == nil
}

// translateUpload returns translated, the translation of err answered to a
// request that names a multipart upload, unless S3 answered NoSuchUpload
// (404): the upload is gone. Someone other than the Put aborted it (a
// bucket's lifecycle rule for incomplete uploads, an operator's cleanup):
// the Put aborts its upload only once it has failed, and answers itself a
// completion sent again that finds its upload gone. Nothing was stored,
// and the key holds what it held: the error says so, and is neither
// ErrNotFound, which a Put cannot be, nor, with IfMatch, ErrConflict,
// which would tell the caller that another writer changed the object.
func translateUpload(err error, uploadID *string, translated error) error {
	if noSuchUpload(err) {
		return fmt.Errorf("the multipart upload %s was aborted before it completed, by someone other than this store (a lifecycle rule for incomplete uploads, or a cleanup); nothing was stored: %w: %w",
			aws.ToString(uploadID), ports.ErrNotDone, err)
	}
	return translated
}

// unstored returns translated, the translation of err answered to a request
// of a multipart Put before its completion was sent, marked
// ports.ErrNotDone when the failure passes (transient): an upload publishes
// nothing until it completes, so nothing was stored, and the Put may store
// if sent again. Any other failure (a refusal of the caller's key, of the
// store's credentials) is returned as it is.
func unstored(err, translated error) error {
	if transient(err) {
		return fmt.Errorf("nothing was stored: %w: %w", ports.ErrNotDone, translated)
	}
	return translated
}

// noSuchUpload reports whether S3 answered err because the upload it
// names is gone.
func noSuchUpload(err error) bool {
	var apiErr smithy.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode() == "NoSuchUpload"
}

// folder reports whether a completion failed with err because key is a
// folder of other keys, naming one of them. versitygw refuses a put of one
// request there 409 ExistingObjectIsDirectory (nesting), but a completion
// 500 InternalError, which alone says nothing of whether the object was
// stored. So only a 500 is looked into, and taken for that refusal only
// when a key lies under key+"/" and no object is at key: a completion
// that stored the object, its answer a 500 all the same, leaves it there.
// On a service that keeps "a" beside "a/b" the object is found and the
// error stands.
func (s *Store) folder(ctx context.Context, key string, err error) (string, bool) {
	var resp *smithyhttp.ResponseError
	if !errors.As(err, &resp) || resp.HTTPStatusCode() != http.StatusInternalServerError {
		return "", false
	}
	inner, ok := s.under(ctx, key)
	if !ok {
		return "", false
	}
	if _, err := s.Stat(ctx, key); !errors.Is(err, ports.ErrNotFound) {
		return "", false
	}
	return inner, true
}

// abort drops a failed upload's parts, so they neither cost storage nor
// ever appear. It runs on a context of its own, for up to abortTimeout,
// since the Put's may be over, and the Put waits for it only while its
// context lasts: a Put whose caller gave up returns at once, its cleanup
// still running (cleanups), where it waited up to abortTimeout on a
// service that was slow to answer, holding its caller's transfer slot.
func (s *Store) abort(ctx context.Context, key string, uploadID *string) {
	in := &s3.AbortMultipartUploadInput{
		Bucket:   aws.String(s.bucket),
		Key:      aws.String(key),
		UploadId: uploadID,
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		// Nothing waits for a cleanup once the store is closed: this one
		// runs only while its caller waits, and an upload it leaves is
		// the bucket's lifecycle rule's to remove.
		cctx, cancel := context.WithTimeout(ctx, abortTimeout)
		defer cancel()
		s.client.AbortMultipartUpload(cctx, in)
		return
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abortTimeout)
	s.cleanups.Add(1)
	s.mu.Unlock()
	stop := context.AfterFunc(s.closing, cancel)
	done := make(chan struct{})
	go func() {
		defer s.cleanups.Done()
		defer close(done)
		defer cancel()
		defer stop()
		s.client.AbortMultipartUpload(actx, in)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// written describes an object just stored. A write's response carries no
// time, so it is read back, if the object still holds what was written;
// otherwise a later writer has replaced it and the local time stands in.
func (s *Store) written(ctx context.Context, key, tag string, size int64, opts ports.PutObjectOptions) ports.ObjectInfo {
	info := ports.ObjectInfo{Key: key, Size: size, ETag: tag, ContentType: contentType(opts), Modified: time.Now().UTC()}
	head, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key), IfMatch: quote(tag)})
	if err == nil && head.LastModified != nil {
		info.Modified = head.LastModified.UTC()
	}
	return info
}

// Get implements ports.ObjectStorage.
func (s *Store) Get(ctx context.Context, key string, opts ports.GetObjectOptions) (io.ReadCloser, ports.ObjectInfo, error) {
	if err := checkKey(key); err != nil {
		return nil, ports.ObjectInfo{}, err
	}
	if err := objkey.CheckGet(key, opts); err != nil {
		return nil, ports.ObjectInfo{}, err
	}
	in := &s3.GetObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)}
	if opts.Offset > 0 || opts.Length > 0 {
		rng := fmt.Sprintf("bytes=%d-", opts.Offset)
		// A range whose last byte is past what an int64 names runs to
		// the end, as any range past the object's end does: the sum
		// would wrap negative, a Range the service ignores or refuses.
		if opts.Length > 0 && opts.Length <= math.MaxInt64-opts.Offset {
			rng += strconv.FormatInt(opts.Offset+opts.Length-1, 10)
		}
		in.Range = aws.String(rng)
	}
	var out *s3.GetObjectOutput
	for try := 1; ; try++ {
		var err error
		out, err = s.client.GetObject(ctx, in)
		if err == nil {
			break
		}
		err = translate(err)
		if !errors.Is(err, ports.ErrInvalidArgument) {
			return nil, ports.ObjectInfo{}, fmt.Errorf("get %q: %w", key, err)
		}
		body, info, grown, err := s.emptyRange(ctx, key, opts)
		if grown && try < rangeTries {
			continue
		}
		return body, info, err
	}
	info := ports.ObjectInfo{
		Key:         key,
		Size:        aws.ToInt64(out.ContentLength),
		ETag:        etag(out.ETag),
		ContentType: aws.ToString(out.ContentType),
		Modified:    aws.ToTime(out.LastModified).UTC(),
	}
	if in.Range != nil {
		total, err := rangeTotal(aws.ToString(out.ContentRange))
		if err != nil {
			out.Body.Close()
			return nil, ports.ObjectInfo{}, fmt.Errorf("get %q: %w", key, err)
		}
		info.Size = total
	}
	return out.Body, info, nil
}

// rangeTries is how many times Get asks for a range that S3 refused as
// past the object's end, when the object it then finds is longer: it was
// replaced between the two requests.
const rangeTries = 5

// emptyRange answers a range S3 refused: S3 refuses a range that starts at
// the end of the object, which the port reads as empty. grown reports that
// the object found now holds the range after all: it was replaced since
// the refusal, and the range is to be asked for again.
func (s *Store) emptyRange(ctx context.Context, key string, opts ports.GetObjectOptions) (io.ReadCloser, ports.ObjectInfo, bool, error) {
	info, err := s.Stat(ctx, key)
	if err != nil {
		return nil, ports.ObjectInfo{}, false, err
	}
	if _, _, err := objkey.Span(key, opts, info.Size); err != nil {
		return nil, ports.ObjectInfo{}, false, err
	}
	if opts.Offset < info.Size {
		return nil, ports.ObjectInfo{}, true, fmt.Errorf("get %q range %+v: the object changed under each of %d reads", key, opts, rangeTries)
	}
	return io.NopCloser(strings.NewReader("")), info, false, nil
}

// rangeTotal reads the object's size from a Content-Range header such as
// "bytes 0-9/1000".
func rangeTotal(contentRange string) (int64, error) {
	i := strings.LastIndexByte(contentRange, '/')
	if i < 0 {
		return 0, fmt.Errorf("content range %q names no size", contentRange)
	}
	total, err := strconv.ParseInt(contentRange[i+1:], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("content range %q: %w", contentRange, err)
	}
	return total, nil
}

// Stat implements ports.ObjectStorage.
func (s *Store) Stat(ctx context.Context, key string) (ports.ObjectInfo, error) {
	if err := checkKey(key); err != nil {
		return ports.ObjectInfo{}, err
	}
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)})
	if err != nil {
		return ports.ObjectInfo{}, fmt.Errorf("stat %q: %w", key, translate(err))
	}
	return ports.ObjectInfo{
		Key:         key,
		Size:        aws.ToInt64(out.ContentLength),
		ETag:        etag(out.ETag),
		ContentType: aws.ToString(out.ContentType),
		Modified:    aws.ToTime(out.LastModified).UTC(),
	}, nil
}

// Delete implements ports.ObjectStorage. S3 deletes a missing key without
// complaint, so Delete reads the ETag first and deletes only that version:
// of two concurrent Deletes, one finds the object gone.
func (s *Store) Delete(ctx context.Context, key string) error {
	for {
		info, err := s.Stat(ctx, key)
		if err != nil && transient(err) {
			return fmt.Errorf("delete: nothing was deleted: %w: %w", ports.ErrNotDone, err)
		}
		if err != nil {
			return fmt.Errorf("delete: %w", err)
		}
		// Sent once: sent again after the first removed the object, it
		// finds no object at that ETag, and the Delete would answer
		// ErrNotFound for a key it removed.
		var sent sendings
		_, err = s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key), IfMatch: quote(info.ETag)}, sentOnce, sent.follow)
		if err != nil && sent.undone(err) {
			return fmt.Errorf("delete %q: the service refused each sending, or none reached it; nothing was deleted: %w: %w", key, ports.ErrNotDone, err)
		}
		err = translate(err)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, ports.ErrConflict):
			continue // replaced since the Stat: delete what is there now
		default:
			return fmt.Errorf("delete %q: %w", key, err)
		}
	}
}

// List implements ports.ObjectStorage. The cursor is the last key of the
// previous page. S3 lists no content types, so List leaves them empty.
func (s *Store) List(ctx context.Context, prefix string, limit int, cursor string) ([]ports.ObjectInfo, string, error) {
	limit, err := storecheck.Limit("limit", limit)
	if err != nil {
		return nil, "", err
	}
	if err := objkey.CheckList(prefix, cursor); err != nil {
		return nil, "", err
	}
	in := &s3.ListObjectsV2Input{
		Bucket:  aws.String(s.bucket),
		Prefix:  aws.String(prefix),
		MaxKeys: aws.Int32(int32(min(limit, 1000))),
	}
	if cursor != "" {
		in.StartAfter = aws.String(cursor)
	}
	var infos []ports.ObjectInfo
	for {
		out, err := s.client.ListObjectsV2(ctx, in)
		if err != nil {
			return nil, "", fmt.Errorf("list %q after %q: %w", prefix, cursor, translate(err))
		}
		for _, o := range out.Contents {
			infos = append(infos, ports.ObjectInfo{
				Key:      aws.ToString(o.Key),
				Size:     aws.ToInt64(o.Size),
				ETag:     etag(o.ETag),
				Modified: aws.ToTime(o.LastModified).UTC(),
			})
		}
		more := aws.ToBool(out.IsTruncated)
		switch {
		case len(infos) >= limit && (more || len(infos) > limit):
			infos = infos[:limit]
			return infos, infos[limit-1].Key, nil
		case !more:
			return infos, "", nil
		}
		in.ContinuationToken = out.NextContinuationToken
		in.MaxKeys = aws.Int32(int32(min(limit-len(infos), 1000)))
	}
}
