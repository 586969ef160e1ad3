package meshca_test

import (
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"testing"

	"mesh/meshca"
)

// DESIGN: CheckCSR refuses a request naming anything but the machine. A
// SAN of a kind Go does not read (a directoryName, a registeredID) beside
// the machine's URI, and subject attributes naming another enrolment or an
// organisation, passed unsaid (the template dropped them; nothing said
// someone asked for more).
func TestCheckCSR_OtherNameKindsAreRefused(t *testing.T) {
	key, err := meshca.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	dn, _ := asn1.Marshal(pkix.Name{CommonName: "admin"}.ToRDNSequence())
	rid, _ := asn1.Marshal(asn1.ObjectIdentifier{1, 2, 3, 4})
	uri := asn1.RawValue{Class: 2, Tag: 6, Bytes: []byte(meshca.MachineURI("m1"))}
	dir := asn1.RawValue{Class: 2, Tag: 4, IsCompound: true, Bytes: dn}
	reg := asn1.RawValue{Class: 2, Tag: 8, Bytes: rid[2:]}
	san := func(names ...asn1.RawValue) []pkix.Extension {
		v, err := asn1.Marshal(names)
		if err != nil {
			t.Fatal(err)
		}
		return []pkix.Extension{{Id: asn1.ObjectIdentifier{2, 5, 29, 17}, Value: v}}
	}
	check := func(tmpl *x509.CertificateRequest) error {
		der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
		if err != nil {
			t.Fatal(err)
		}
		_, err = meshca.CheckCSR(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), "m1")
		return err
	}
	for name, tmpl := range map[string]*x509.CertificateRequest{
		"a directoryName":             {Subject: pkix.Name{CommonName: "m1"}, ExtraExtensions: san(uri, dir)},
		"a registeredID":              {Subject: pkix.Name{CommonName: "m1"}, ExtraExtensions: san(uri, reg)},
		"another enrolment's serial":  {Subject: pkix.Name{CommonName: "m1", SerialNumber: "another-enrolment"}},
		"an organisation":             {Subject: pkix.Name{CommonName: "m1", Organization: []string{"admins"}}},
		"an organisation and no name": {Subject: pkix.Name{Organization: []string{"admins"}}},
	} {
		if err := check(tmpl); err == nil {
			t.Errorf("%s: CheckCSR took a request naming more than machine m1", name)
		}
	}
	// What a host sends is still taken: the name and its URI, or nothing.
	for name, tmpl := range map[string]*x509.CertificateRequest{
		"the name and its URI": {Subject: pkix.Name{CommonName: "m1"}, ExtraExtensions: san(uri)},
		"the name":             {Subject: pkix.Name{CommonName: "m1"}},
		"nothing":              {},
	} {
		if err := check(tmpl); err != nil {
			t.Errorf("%s: refused: %v", name, err)
		}
	}
}
