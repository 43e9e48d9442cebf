// SPDX-License-Identifier: Apache-2.0
package kubetest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"time"
)

// pki is the key material a control plane is started with, as files in its directory.
type pki struct {
	// caFile is the PEM CA certificate that signed the serving certificate; clients trust it.
	caFile string
	// certFile and keyFile are kube-apiserver's serving certificate and key.
	certFile, keyFile string
	// saKeyFile is the PEM private key that signs and verifies service-account tokens.
	saKeyFile string
}

// writePKI generates a CA, a serving certificate for 127.0.0.1, localhost, the first service IP
// and addr (the apiserver's address), and a service-account signing key, into dir.
func writePKI(dir string, addr netip.Addr) (pki, error) {
	p := pki{
		caFile:    filepath.Join(dir, "ca.crt"),
		certFile:  filepath.Join(dir, "apiserver.crt"),
		keyFile:   filepath.Join(dir, "apiserver.key"),
		saKeyFile: filepath.Join(dir, "sa.key"),
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return pki{}, fmt.Errorf("generate CA key: %w", err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "xlb-kubetest-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return pki{}, fmt.Errorf("sign CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return pki{}, fmt.Errorf("parse CA certificate: %w", err)
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return pki{}, fmt.Errorf("generate serving key: %w", err)
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv4(10, 96, 0, 1)},
	}
	if addr.IsValid() && !addr.IsLoopback() {
		srvTmpl.IPAddresses = append(srvTmpl.IPAddresses, net.IP(addr.Unmap().AsSlice()))
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		return pki{}, fmt.Errorf("sign serving certificate: %w", err)
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return pki{}, fmt.Errorf("generate service-account key: %w", err)
	}
	for _, f := range []struct {
		path, typ string
		der       []byte
		key       *ecdsa.PrivateKey
	}{
		{path: p.caFile, typ: "CERTIFICATE", der: caDER},
		{path: p.certFile, typ: "CERTIFICATE", der: srvDER},
		{path: p.keyFile, key: srvKey},
		{path: p.saKeyFile, key: saKey},
	} {
		if f.key != nil {
			der, err := x509.MarshalECPrivateKey(f.key)
			if err != nil {
				return pki{}, fmt.Errorf("encode key for %s: %w", f.path, err)
			}
			f.typ, f.der = "EC PRIVATE KEY", der
		}
		if err := os.WriteFile(f.path, pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.der}), 0o600); err != nil {
			return pki{}, fmt.Errorf("write %s: %w", f.path, err)
		}
	}
	return p, nil
}
