package translate

import (
	"testing"

	"google.golang.org/protobuf/proto"
)

func BenchmarkTmpMarshalDet(b *testing.B) {
	f, _ := benchFleets()
	eps, _ := TranslateEndpoints(f)
	for b.Loop() {
		for _, e := range eps {
			proto.MarshalOptions{Deterministic: true}.Marshal(e)
		}
	}
}
func BenchmarkTmpMarshalNonDet(b *testing.B) {
	f, _ := benchFleets()
	eps, _ := TranslateEndpoints(f)
	for b.Loop() {
		for _, e := range eps {
			proto.MarshalOptions{}.Marshal(e)
		}
	}
}
func BenchmarkTmpSize(b *testing.B) {
	f, _ := benchFleets()
	eps, _ := TranslateEndpoints(f)
	for b.Loop() {
		for _, e := range eps {
			proto.Size(e)
		}
	}
}
func BenchmarkTmpTranslateEndpoints(b *testing.B) {
	f, _ := benchFleets()
	for b.Loop() {
		TranslateEndpoints(f)
	}
}
func BenchmarkTmpValidate(b *testing.B) {
	f, _ := benchFleets()
	eps, _ := TranslateEndpoints(f)
	for b.Loop() {
		for _, e := range eps {
			e.ValidateAll()
		}
	}
}
func BenchmarkTmpPrepare(b *testing.B) {
	f, _ := benchFleets()
	for b.Loop() {
		prepare(f)
	}
}
func BenchmarkTmpNormalize(b *testing.B) {
	f, _ := benchFleets()
	for b.Loop() {
		f.Normalize()
	}
}
func BenchmarkTmpSnapshotNoEDS(b *testing.B) {
	f, _ := benchFleets()
	r, _ := Translate(f, Envoy)
	r.Endpoints = nil
	for b.Loop() {
		Version(r.Listeners)
		Version(r.Clusters)
		Version(r.Routes)
	}
}
