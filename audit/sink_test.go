package audit

import (
	"context"
	"errors"
	"testing"
)

// checkerSink is a Sink that is a Checker, answering err.
type checkerSink struct{ err error }

func (checkerSink) Write(context.Context, Record) error { return nil }
func (s checkerSink) Err() error                        { return s.err }

var (
	_ Sink    = checkerSink{}
	_ Checker = checkerSink{}
)

// wrapperSink writes to inner and says so (Unwrapper), without being a Checker itself.
type wrapperSink struct{ inner Sink }

func (w *wrapperSink) Write(ctx context.Context, r Record) error { return w.inner.Write(ctx, r) }
func (w *wrapperSink) Unwrap() Sink                              { return w.inner }

var (
	_ Sink      = (*wrapperSink)(nil)
	_ Unwrapper = (*wrapperSink)(nil)
)

// A wrapped sink is checked through its wrappers: wrapping never turns the check off.
func TestCheckThroughWrappers(t *testing.T) {
	down := errors.Join(ErrUnavailable, errors.New("disk full"))
	self := &wrapperSink{}
	self.inner = self
	for _, c := range []struct {
		name string
		sink Sink
		want error
	}{
		{"no sink", nil, nil},
		{"a sink that cannot tell", Discard{}, nil},
		{"a healthy checker", checkerSink{}, nil},
		{"a failing checker", checkerSink{err: down}, down},
		{"a failing checker, wrapped", &wrapperSink{inner: checkerSink{err: down}}, down},
		{"a failing checker, wrapped twice", &wrapperSink{inner: &wrapperSink{inner: checkerSink{err: down}}}, down},
		{"a wrapper of a sink that cannot tell", &wrapperSink{inner: Discard{}}, nil},
		{"a wrapper of nothing", &wrapperSink{}, nil},
		{"a wrapper that is a checker answers itself", &checkingWrapper{checkerSink: checkerSink{err: down}, inner: checkerSink{}}, down},
		{"a wrapper that wraps itself", self, ErrUnavailable},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := Check(c.sink); !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
				t.Fatalf("Check: %v, want %v", err, c.want)
			}
		})
	}
}

// checkingWrapper wraps inner and answers Err itself.
type checkingWrapper struct {
	checkerSink
	inner Sink
}

func (w *checkingWrapper) Unwrap() Sink { return w.inner }

var (
	_ Checker   = (*checkingWrapper)(nil)
	_ Unwrapper = (*checkingWrapper)(nil)
)
