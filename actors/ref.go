package actors

import (
	"github.com/asynkron/protoactor-go/actor"
	"github.com/musepi/musepi/messages/protocol"
)

// Ref is pid as the protocol carries it (protocol.ActorRef: the same
// fields, so package messages needs no protoactor); nil for nil.
func Ref(pid *actor.PID) *protocol.ActorRef {
	if pid == nil {
		return nil
	}
	return &protocol.ActorRef{Address: pid.GetAddress(), Id: pid.GetId(), RequestId: pid.GetRequestId()}
}

// PID is the actor that ref names; nil for nil.
func PID(ref *protocol.ActorRef) *actor.PID {
	if ref == nil {
		return nil
	}
	return &actor.PID{Address: ref.GetAddress(), Id: ref.GetId(), RequestId: ref.GetRequestId()}
}
