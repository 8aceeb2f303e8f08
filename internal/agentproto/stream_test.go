package agentproto

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

func TestRecords(t *testing.T) {
	big := bytes.Repeat([]byte("x"), ChunkSize+10)
	var buf bytes.Buffer
	if err := WriteChunk(&buf, Stderr, big); err != nil {
		t.Fatal(err)
	}
	if err := WriteChunk(&buf, Stdout, nil); err != nil {
		t.Fatal(err)
	}
	if err := WriteJSON(&buf, map[string]int{"exit_code": 3}); err != nil {
		t.Fatal(err)
	}
	if err := WriteEnd(&buf); err != nil {
		t.Fatal(err)
	}
	var got []byte
	for range 2 {
		rec, err := ReadRecord(&buf)
		if err != nil || rec.Kind != RecordChunk || rec.Stream != Stderr {
			t.Fatalf("record %+v, %v; want a stderr chunk", rec.Kind, err)
		}
		got = append(got, rec.Data...)
	}
	if !bytes.Equal(got, big) {
		t.Errorf("chunks carry %d bytes, want %d", len(got), len(big))
	}
	rec, err := ReadRecord(&buf)
	var v struct {
		ExitCode int `json:"exit_code"`
	}
	if err != nil || rec.Decode(&v) != nil || v.ExitCode != 3 {
		t.Fatalf("JSON record %+v, %v, %+v", rec, err, v)
	}
	if rec, err := ReadRecord(&buf); err != nil || rec.Kind != RecordEnd {
		t.Fatalf("end record %+v, %v", rec, err)
	}
	if _, err := ReadRecord(&buf); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("past the end: %v, want io.ErrUnexpectedEOF", err)
	}
}

func TestReadHostFrames(t *testing.T) {
	var buf bytes.Buffer
	dw := NewDataWriter(&buf)
	dw.Write([]byte("ab"))
	WriteJSON(&buf, map[string]int{"cols": 80})
	dw.Write([]byte("c"))
	dw.Close()
	var data, ctrl []string
	err := ReadHostFrames(&buf,
		func(p []byte) error { data = append(data, string(p)); return nil },
		func(p []byte) error { ctrl = append(ctrl, string(p)); return nil })
	if err != nil || len(data) != 2 || data[0] != "ab" || data[1] != "c" || len(ctrl) != 1 || ctrl[0] != `{"cols":80}` {
		t.Errorf("data %q ctrl %q err %v", data, ctrl, err)
	}
	if err := ReadHostFrames(&buf, nil, nil); !errors.Is(err, io.EOF) {
		t.Errorf("a closed stream: %v, want io.EOF", err)
	}
}
