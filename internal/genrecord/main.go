// Command genrecord generates a session record's wire form from its one
// definition, the Go structs of package session (Record, ModelState,
// ChainRecord) and of package retry (EndEvent): messages/record.proto and
// session/record_wire.go. Each field to store carries its protobuf field
// number in a `wire:"N"` tag; `wire:"N,flat"` stores a struct's fields in
// its parent's, numbered from N, their names prefixed with the field's
// name. A struct's "wire: reserved N NAME" comment line reserves a number
// that a removed field used. Adding a field to a record is one edit, the
// field and its tag, then `go generate ./...`.
//
// It runs from messages (go generate), before protoc: genrecord <root>.
package main

import (
	"bytes"
	"fmt"
	"github.com/musepi/musepi/internal/protoname"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
)

// record is one Go struct stored as one protobuf message.
type record struct {
	goName, pkg string // "Record", "session"
	message     string // "SessionRecord"
	doc         string
	reserved    []string // "6; // now_unix_nano: ..."
	fields      []field
}

// field is one stored field of a record.
type field struct {
	goPath  string // Go selector from the struct: "Aborts.User"
	goType  string // as written: "time.Time", "State", "*retry.EndEvent"
	number  int
	name    string // protobuf name: "primary_until_unix_nano"
	comment string
}

// The records, in the order the .proto lists them: the Go struct, its
// source file (from the module root) and its message.
var records = []struct{ goName, file, message string }{
	{"Record", "session/record.go", "SessionRecord"},
	{"ModelState", "session/record.go", "RecordModelState"},
	{"ChainRecord", "session/chain.go", "RecordChain"},
	{"EndEvent", "retry/events.go", "RecordRetryEnd"},
}

// flatStructs are the structs a `flat` field may name, by Go type, with
// their source file.
var flatStructs = map[string]string{"retry.AbortState": "retry/class.go"}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: genrecord <module root>")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "genrecord:", err)
		os.Exit(1)
	}
}

// The files generated, from the module root.
const (
	protoPath = "messages/record.proto"
	goPath    = "session/record_wire.go"
)

func run(root string) error {
	proto, src, err := generate(root)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(root, protoPath), proto, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(root, goPath), src, 0o644)
}

// generate returns the contents of the .proto and the Go file.
func generate(root string) (proto, src []byte, err error) {
	var recs []record
	for _, r := range records {
		rec, err := parseRecord(root, r.file, r.goName, r.message)
		if err != nil {
			return nil, nil, err
		}
		recs = append(recs, rec)
	}
	addRecords(recs)
	src, err = format.Source(goFile(recs))
	if err != nil {
		return nil, nil, fmt.Errorf("format the Go code: %w", err)
	}
	return protoFile(recs), src, nil
}

// structType finds type name's struct in file, with its doc.
func structType(root, file, name string) (*ast.StructType, string, error) {
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(root, file), nil, parser.ParseComments)
	if err != nil {
		return nil, "", err
	}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok {
			continue
		}
		for _, s := range g.Specs {
			if ts, ok := s.(*ast.TypeSpec); ok && ts.Name.Name == name {
				st, ok := ts.Type.(*ast.StructType)
				if !ok {
					return nil, "", fmt.Errorf("%s: %s is not a struct", file, name)
				}
				return st, g.Doc.Text(), nil
			}
		}
	}
	return nil, "", fmt.Errorf("%s: no type %s", file, name)
}

var reservedLine = regexp.MustCompile(`(?m)^wire: reserved (\d+) (.*)$`)

// parseRecord reads the struct goName of file as a record.
func parseRecord(root, file, goName, message string) (record, error) {
	st, doc, err := structType(root, file, goName)
	if err != nil {
		return record{}, err
	}
	rec := record{goName: goName, pkg: filepath.Dir(file), message: message}
	for _, m := range reservedLine.FindAllStringSubmatch(doc, -1) {
		rec.reserved = append(rec.reserved, fmt.Sprintf("%s; // %s", m[1], m[2]))
	}
	rec.doc = strings.TrimSpace(reservedLine.ReplaceAllString(doc, ""))
	for _, f := range st.Fields.List {
		if f.Tag == nil {
			continue
		}
		tag, ok := reflect.StructTag(strings.Trim(f.Tag.Value, "`")).Lookup("wire")
		if !ok {
			continue
		}
		fields, err := storedFields(root, f, tag)
		if err != nil {
			return record{}, fmt.Errorf("%s: %s: %w", file, goName, err)
		}
		rec.fields = append(rec.fields, fields...)
	}
	return rec, nil
}

// storedFields are the fields a tagged struct field stores: itself, or
// the fields of its struct (flat).
func storedFields(root string, f *ast.Field, tag string) ([]field, error) {
	num, flat, _ := strings.Cut(tag, ",")
	n, err := strconv.Atoi(num)
	if err != nil || len(f.Names) != 1 {
		return nil, fmt.Errorf("wire tag %q: want one named field and a field number", tag)
	}
	name, typ := f.Names[0].Name, typeString(f.Type)
	comment := strings.TrimSpace(f.Comment.Text() + " " + f.Doc.Text())
	if flat != "flat" {
		return []field{{goPath: name, goType: typ, number: n, name: protoName(name, typ), comment: comment}}, nil
	}
	file, ok := flatStructs[typ]
	if !ok {
		return nil, fmt.Errorf("field %s: no flat struct %s", name, typ)
	}
	_, goName, _ := strings.Cut(typ, ".")
	st, _, err := structType(root, file, goName)
	if err != nil {
		return nil, err
	}
	var out []field
	for _, sf := range st.Fields.List {
		for _, id := range sf.Names {
			t := typeString(sf.Type)
			out = append(out, field{goPath: name + "." + id.Name, goType: t, number: n + len(out),
				name: protoname.Snake(strings.TrimSuffix(name, "s")) + "_" + protoName(id.Name, t), comment: strings.TrimSpace(sf.Comment.Text())})
		}
	}
	return out, nil
}

// typeString writes a field's type as the source has it.
func typeString(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.Ident:
		return t.Name
	case *ast.SelectorExpr:
		return typeString(t.X) + "." + t.Sel.Name
	case *ast.StarExpr:
		return "*" + typeString(t.X)
	}
	return fmt.Sprintf("%T", e)
}

// protoName is a field's protobuf name: its Go name in snake case, with
// its unit for instants and durations.
func protoName(goName, goType string) string {
	switch goType {
	case "time.Time":
		return protoname.Snake(goName) + "_unix_nano"
	case "time.Duration":
		return protoname.Snake(goName) + "_ns"
	}
	return protoname.Snake(goName)
}

// protoFile is messages/record.proto.
func protoFile(recs []record) []byte {
	var b bytes.Buffer
	b.WriteString("// Code generated by internal/genrecord from session.Record and the types it holds. DO NOT EDIT.\n\n")
	b.WriteString("syntax = \"proto3\";\n\npackage musepi.v1;\n\nimport \"assistant.proto\";\n\n")
	b.WriteString("option go_package = \"github.com/musepi/musepi/messages\";\n")
	for _, r := range recs {
		fmt.Fprintf(&b, "\n// %s is %s.%s's wire form, generated from it:\n//\n", r.message, r.pkg, r.goName)
		for _, line := range strings.Split(r.doc, "\n") {
			b.WriteString(strings.TrimRight("// "+line, " ") + "\n")
		}
		fmt.Fprintf(&b, "message %s {\n", r.message)
		for _, f := range r.fields {
			fmt.Fprintf(&b, "  %s %s = %d;", protoType(r.pkg, f.goType), f.name, f.number)
			if f.comment != "" {
				fmt.Fprintf(&b, " // %s", strings.Join(strings.Fields(f.comment), " "))
			}
			b.WriteString("\n")
		}
		for _, res := range r.reserved {
			fmt.Fprintf(&b, "  reserved %s\n", res)
		}
		b.WriteString("}\n")
	}
	return b.Bytes()
}

// conversion is how a Go type is stored: its protobuf type, the Go
// expression that writes a value (%s), and how it is read back: an
// expression of the wire value, or (fallible) a function
// "name(wire, *value) error".
type conversion struct {
	proto, write, read string
	fallible           bool
}

// conversions are the stored types; the records' own are added by run.
var conversions = map[string]conversion{
	"uint64":                     {"uint64", "%s", "%s", false},
	"bool":                       {"bool", "%s", "%s", false},
	"string":                     {"string", "%s", "%s", false},
	"int":                        {"int32", "int32(%s)", "int(%s)", false},
	"time.Time":                  {"int64", "unixNano(%s)", "fromUnixNano(%s)", false},
	"time.Duration":              {"int64", "int64(%s)", "time.Duration(%s)", false},
	"ErrorKind":                  {"string", "string(%s)", "ErrorKind(%s)", false},
	"*messages.AssistantMessage": {"AssistantMessage", "%s", "%s", false},
	"State":                      {"string", "%s.String()", "stateFromWire", true},
	"retry.Class":                {"string", "%s.String()", "classFromWire", true},
}

// addRecords adds the conversions of the records themselves: a nested
// message, written from a pointer and read into one.
func addRecords(recs []record) {
	for _, r := range recs {
		c := conversion{proto: r.message, write: r.funcName() + "Wire(&%s)", read: r.funcName() + "FromWire", fallible: true}
		conversions[r.goType()] = c
		c.write = r.funcName() + "Wire(%s)"
		conversions["*"+r.goType()] = c
	}
}

// conversionOf is the conversion of a field of a struct of package pkg.
func conversionOf(pkg, typ string) conversion {
	if pkg == "retry" && typ == "Class" {
		typ = "retry.Class"
	}
	return conversions[typ]
}

func protoType(pkg, goType string) string { return conversionOf(pkg, goType).proto }

// goFile is session/record_wire.go: a function each way per record.
func goFile(recs []record) []byte {
	var b bytes.Buffer
	b.WriteString("// Code generated by internal/genrecord from session.Record and the types it holds. DO NOT EDIT.\n\n")
	b.WriteString("package session\n\nimport (\n\t\"time\"\n\n\t\"github.com/musepi/musepi/messages\"\n\t\"github.com/musepi/musepi/retry\"\n)\n\n")
	b.WriteString("// Wire is the record in its protobuf form, for a store or another node.\n")
	b.WriteString("func (r Record) Wire() *messages.SessionRecord { return recordWire(&r) }\n\n")
	b.WriteString("// RecordFromWire reads a record's protobuf form; a state or class it\n// does not know fails (a record written by a newer program).\n")
	b.WriteString("func RecordFromWire(w *messages.SessionRecord) (Record, error) {\n\tvar r Record\n\terr := recordFromWire(w, &r)\n\treturn r, err\n}\n")
	for _, r := range recs {
		writeFunc(&b, r)
		readFunc(&b, r)
	}
	return b.Bytes()
}

// goType is r's Go type as package session names it.
func (r record) goType() string {
	if r.pkg == "retry" {
		return "retry." + r.goName
	}
	return r.goName
}

// funcName is r's conversion functions' stem: "record", "chainRecord".
func (r record) funcName() string {
	return strings.ToLower(r.goName[:1]) + r.goName[1:]
}

func writeFunc(b *bytes.Buffer, r record) {
	fmt.Fprintf(b, "\nfunc %sWire(x *%s) *messages.%s {\n", r.funcName(), r.goType(), r.message)
	fmt.Fprintf(b, "\tif x == nil {\n\t\treturn nil\n\t}\n\treturn &messages.%s{\n", r.message)
	for _, f := range r.fields {
		fmt.Fprintf(b, "\t\t%s: %s,\n", protoname.Camel(f.name), fmt.Sprintf(conversionOf(r.pkg, f.goType).write, "x."+f.goPath))
	}
	b.WriteString("\t}\n}\n")
}

func readFunc(b *bytes.Buffer, r record) {
	fmt.Fprintf(b, "\nfunc %sFromWire(w *messages.%s, x *%s) error {\n", r.funcName(), r.message, r.goType())
	for _, f := range r.fields {
		c := conversionOf(r.pkg, f.goType)
		get := "w.Get" + protoname.Camel(f.name) + "()"
		switch {
		case strings.HasPrefix(f.goType, "*") && c.fallible: // a nested record that may be absent
			fmt.Fprintf(b, "\tif m := %s; m != nil {\n\t\tx.%s = new(%s)\n\t\tif err := %s(m, x.%s); err != nil {\n\t\t\treturn err\n\t\t}\n\t}\n",
				get, f.goPath, strings.TrimPrefix(f.goType, "*"), c.read, f.goPath)
		case c.fallible:
			fmt.Fprintf(b, "\tif err := %s(%s, &x.%s); err != nil {\n\t\treturn err\n\t}\n", c.read, get, f.goPath)
		default:
			fmt.Fprintf(b, "\tx.%s = %s\n", f.goPath, fmt.Sprintf(c.read, get))
		}
	}
	b.WriteString("\treturn nil\n}\n")
}
