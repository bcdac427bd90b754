package natsapi

import (
	"context"

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
				if err := wire.Limit(r.Limit); err != nil {
					return wire.OSObjects{}, err
				}
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
					return JSON(func(_ context.Context, r wire.TransferOpen) (wire.SessionOpened, error) {
						return transfers.open(store, call.Caller, call.Who(), r)
					})(ctx, call)
				},
			},
		},
	}
}
