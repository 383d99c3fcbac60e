// Package certstest makes certificate authorities and certificates for
// tests: a CA issues server and client certificates for loopback, with
// chosen serial numbers and validity, and writes them as PEM files.
package certstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a self-signed certificate authority.
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// PEM is the CA certificate, PEM-encoded.
	PEM []byte
}

// NewCA returns a CA valid from an hour ago for a day.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{Cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// Leaf is what Issue makes.
type Leaf struct {
	// Serial is the certificate's serial number; zero means 2.
	Serial int64
	// Name is the subject's common name and a DNS name; zero means
	// "localhost".
	Name string
	// Client makes a client certificate, else a server certificate for
	// Name, 127.0.0.1 and ::1.
	Client bool
	// NotBefore and NotAfter default to an hour ago and a day later.
	NotBefore, NotAfter time.Time
}

// Pair is an issued certificate and its private key, PEM-encoded.
type Pair struct {
	Cert, Key []byte
	Serial    *big.Int
}

// Issue makes a certificate signed by ca.
func (ca *CA) Issue(t testing.TB, l Leaf) Pair {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if l.Serial == 0 {
		l.Serial = 2
	}
	if l.Name == "" {
		l.Name = "localhost"
	}
	if l.NotBefore.IsZero() {
		l.NotBefore = time.Now().Add(-time.Hour)
	}
	if l.NotAfter.IsZero() {
		l.NotAfter = time.Now().Add(24 * time.Hour)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(l.Serial),
		Subject:      pkix.Name{CommonName: l.Name},
		DNSNames:     []string{l.Name},
		NotBefore:    l.NotBefore,
		NotAfter:     l.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if l.Client {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	} else {
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return Pair{
		Cert:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Key:    pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
		Serial: big.NewInt(l.Serial),
	}
}

// Files are where WriteFiles put a pair and its CA.
type Files struct {
	Cert, Key, CA string
}

// WriteFiles writes p as cert.pem and key.pem, and ca as ca.pem, in dir,
// each replaced by an atomic rename as rotating agents do. A nil ca
// writes no CA file.
func WriteFiles(t testing.TB, dir string, p Pair, ca *CA) Files {
	t.Helper()
	f := Files{Cert: filepath.Join(dir, "cert.pem"), Key: filepath.Join(dir, "key.pem")}
	WriteAtomic(t, f.Cert, p.Cert)
	WriteAtomic(t, f.Key, p.Key)
	if ca != nil {
		f.CA = filepath.Join(dir, "ca.pem")
		WriteAtomic(t, f.CA, ca.PEM)
	}
	return f
}

// WriteAtomic replaces path with data through a rename.
func WriteAtomic(t testing.TB, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// Volume is a directory laid out as Kubernetes mounts a Secret: each file
// is a symlink through "..data" to a timestamped directory, and an update
// renames a new "..data" symlink over the old one.
type Volume struct {
	Dir string
	gen int
}

// NewVolume returns an empty volume in dir.
func NewVolume(dir string) *Volume { return &Volume{Dir: dir} }

// Write publishes files (name to content) as the volume's new content
// in one atomic swap, and returns the files' paths by name.
func (v *Volume) Write(t testing.TB, files map[string][]byte) map[string]string {
	t.Helper()
	v.gen++
	gen := filepath.Join(v.Dir, "..gen"+time.Now().Format("20060102T150405")+"."+big.NewInt(int64(v.gen)).String())
	if err := os.Mkdir(gen, 0o755); err != nil {
		t.Fatal(err)
	}
	paths := map[string]string{}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(gen, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(v.Dir, name)
		paths[name] = link
		if _, err := os.Lstat(link); os.IsNotExist(err) {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	tmp := filepath.Join(v.Dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(gen), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.Dir, "..data")); err != nil {
		t.Fatal(err)
	}
	return paths
}
