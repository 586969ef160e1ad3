package api

import (
	"bytes"
	"testing"

	"mesh/models"
)

// BenchmarkParkedAnswer_200: the bytes of one woken parked poll's 200 (a
// fan-out writes one per machine), with the headers its connection adds.
func BenchmarkParkedAnswer_200(b *testing.B) {
	comp := &models.Composed{Generation: 12345}
	body := bytes.Repeat([]byte("x"), 900)
	b.ReportAllocs()
	for range b.N {
		a := sendAnswer(comp, "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", body)
		buf := answerBufs.Get().(*[]byte)
		*buf = a.appendTo((*buf)[:0], [][2]string{{HeaderTLS, "https://127.0.0.1:8443"}, {"Connection", "close"}})
		if len(*buf) < len(body) {
			b.Fatal("short")
		}
		answerBufs.Put(buf)
	}
}
