// A small CPU- and allocation-bound program profiled with runtime/pprof.
package main

import (
	"context"
	"os"
	"runtime"
	"runtime/pprof"
	"time"
)

var sink []byte

func mix(x uint64) uint64 { return x*6364136223846793005 + 1442695040888963407 } // inlined

func hash(n int) uint64 {
	var h uint64
	for i := 0; i < n; i++ {
		h = mix(h ^ uint64(i))
	}
	return h
}

func alloc(n int) {
	for i := 0; i < n; i++ {
		sink = make([]byte, 4096+i%3*1024)
	}
}

func work(ctx context.Context, until time.Time) (h uint64) {
	for time.Now().Before(until) {
		h += hash(200000)
		alloc(50)
	}
	return
}

func main() {
	runtime.MemProfileRate = 4096
	f, _ := os.Create("cpu.pb.gz")
	pprof.StartCPUProfile(f)
	until := time.Now().Add(1500 * time.Millisecond)
	done := make(chan bool)
	for _, kind := range []string{"hash", "alloc"} {
		go pprof.Do(context.Background(), pprof.Labels("worker", kind), func(ctx context.Context) {
			work(ctx, until)
			done <- true
		})
	}
	<-done
	<-done
	pprof.StopCPUProfile()
	f.Close()
	h, _ := os.Create("heap.pb.gz")
	pprof.Lookup("allocs").WriteTo(h, 0)
	h.Close()
}
