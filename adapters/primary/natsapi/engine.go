package natsapi

import (
	"context"

	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/wire"
)

// Engine serves abi.svc.engine.v1.info: which engine instance answers, and
// where it stands with the lease.
func Engine(me domain.Holder, state func() domain.State) Service {
	return Service{
		Name:        wire.ServiceEngine,
		Description: "abi-engine: the serving engine instance",
		Endpoints: []Endpoint{{Name: wire.EngineInfo, Handler: JSON(func(context.Context, wire.Empty) (wire.EngineInfoReply, error) {
			return wire.EngineInfoReply{
				InstanceID: me.InstanceID, Host: me.Host, PID: me.PID,
				Version: me.Version, RolloutID: me.RolloutID, State: state().String(),
			}, nil
		})}},
	}
}
