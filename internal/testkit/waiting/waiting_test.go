package waiting

import (
	"flag"
	"testing"
)

func TestParallel(t *testing.T) {
	f := flag.Lookup("test.parallel")
	before := f.Value.String()
	defer func() { _ = f.Value.Set(before) }()
	want := "7"
	flag.Visit(func(set *flag.Flag) { // go test -parallel N: N stays
		if set == f {
			want = before
		}
	})
	if err := Parallel(7); err != nil {
		t.Fatal(err)
	}
	if got := f.Value.String(); got != want {
		t.Errorf("-test.parallel %s after Parallel(7), want %s", got, want)
	}
}
