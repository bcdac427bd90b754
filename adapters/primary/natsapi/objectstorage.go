package natsapi

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

// ObjectStorage serves a ports.ObjectStorage as the object_storage service:
// stat, delete and list in one message each, and transfer.open, which
// opens a transfer on transfers for Put and Get of any size.
func ObjectStorage(store ports.ObjectStorage, transfers *TransferHost) Service {
	return Service{
		Name:        ports.ServiceObjectStorage,
		Description: "abi-engine object storage",
		Endpoints: []Endpoint{
			{Name: wire.OSStat, Handler: JSON(func(ctx context.Context, r wire.OSKey) (wire.ObjectInfo, error) {
				info, err := store.Stat(ctx, r.Key)
				return wire.InfoOf(info), err
			})},
			{Name: wire.OSDelete, Handler: JSON(func(ctx context.Context, r wire.OSKey) (wire.Empty, error) {
				return wire.Empty{}, store.Delete(ctx, r.Key)
			})},
			{Name: wire.OSList, Handler: JSON(func(ctx context.Context, r wire.OSListPage) (wire.OSObjects, error) {
				infos, next, err := store.List(ctx, r.Prefix, r.Limit, r.Cursor)
				out := wire.OSObjects{Objects: make([]wire.ObjectInfo, len(infos)), Cursor: next}
				for i, info := range infos {
					out.Objects[i] = wire.InfoOf(info)
				}
				return out, err
			})},
			{
				Name: wire.OSTransferOpen,
				Handler: func(ctx context.Context, call *Call) ([]byte, error) {
					return JSON(func(ctx context.Context, r wire.TransferOpen) (wire.SessionOpened, error) {
						if err := otherModeFields(r.Mode, call.Data); err != nil {
							return wire.SessionOpened{}, err
						}
						return transfers.open(ctx, store, call.Caller, call.Who(), r)
					})(ctx, call)
				},
			},
		},
	}
}

// otherModeFields refuses a field of transfer.open that only the other
// mode takes: ignored, a get sent with if_match or a put with an offset
// would run without what its caller asked of it. data is the body, which
// has decoded; a field given with its zero value is refused too, as the
// body says the caller took the transfer for the other mode. A put's
// if_match given as "" is refused too.
func otherModeFields(mode string, data []byte) error {
	var foreign []string
	switch mode {
	case wire.TransferPut:
		foreign = []string{"offset", "length"}
	case wire.TransferGet:
		foreign = []string{"content_type", "if_absent", "if_match"}
	default:
		return nil // the mode itself is refused
	}
	var fields map[string]json.RawMessage
	if wire.Blank(data) || json.Unmarshal(data, &fields) != nil {
		return nil
	}
	for _, f := range foreign {
		if _, ok := fields[f]; ok {
			return fmt.Errorf("%w: field %q: a %s transfer does not take it", ports.ErrInvalidArgument, f, mode)
		}
	}
	// An if_match of "" names no ETag. Read as it decodes, it is no
	// condition, and the put would overwrite whatever is stored where its
	// caller asked it to write only over one version. The Go facade leaves
	// the field out when it has no condition.
	if m, ok := fields["if_match"]; ok && mode == wire.TransferPut && string(m) == `""` {
		return fmt.Errorf("%w: field \"if_match\" is \"\": want the ETag the put must match, or leave the field out", ports.ErrInvalidArgument)
	}
	return nil
}
