package rpc

import (
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// toJSON turns a protobuf message into a JSON-ready map with camelCase
// names: 64-bit integers stay numbers (protojson would quote them), enums
// are lower-case words, and unset optional fields are left out. It renders
// MusePi's own events (auto_retry_start, ...); pi's messages are rendered by
// wire.go.
func toJSON(m proto.Message) map[string]any {
	if m == nil {
		return nil
	}
	out := map[string]any{}
	r := m.ProtoReflect()
	fields := r.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if fd.HasPresence() && !r.Has(fd) {
			continue
		}
		out[fd.JSONName()] = value(fd, r.Get(fd))
	}
	return out
}

func value(fd protoreflect.FieldDescriptor, v protoreflect.Value) any {
	switch {
	case fd.IsList():
		l := v.List()
		items := make([]any, l.Len())
		for i := range items {
			items[i] = scalar(fd, l.Get(i))
		}
		return items
	case fd.IsMap():
		mm := map[string]any{}
		v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
			mm[k.String()] = scalar(fd.MapValue(), mv)
			return true
		})
		return mm
	}
	return scalar(fd, v)
}

func scalar(fd protoreflect.FieldDescriptor, v protoreflect.Value) any {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return toJSON(v.Message().Interface())
	case protoreflect.EnumKind:
		return enumWord(fd.Enum(), v.Enum())
	case protoreflect.BytesKind:
		return v.Bytes()
	}
	return v.Interface()
}

// enumWord is the enum value name without its type prefix, lower-cased:
// STOP_REASON_TOOL_USE → "tool_use".
func enumWord(ed protoreflect.EnumDescriptor, n protoreflect.EnumNumber) string {
	vd := ed.Values().ByNumber(n)
	if vd == nil {
		return ""
	}
	return strings.ToLower(strings.TrimPrefix(string(vd.Name()), commonPrefix(ed)))
}

// commonPrefix is the prefix, up to an underscore, that all value names of
// ed share ("STOP_REASON_").
func commonPrefix(ed protoreflect.EnumDescriptor) string {
	vals := ed.Values()
	if vals.Len() < 2 {
		return ""
	}
	p := string(vals.Get(0).Name())
	for i := 1; i < vals.Len(); i++ {
		n := string(vals.Get(i).Name())
		for !strings.HasPrefix(n, p) {
			p = p[:len(p)-1]
		}
	}
	if j := strings.LastIndexByte(p, '_'); j >= 0 {
		return p[:j+1]
	}
	return ""
}
