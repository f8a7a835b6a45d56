package integration

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/test/framework"
)

// issued is a certificate and its key, in PEM.
type issued struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
	keyPEM  []byte
	keyPair tls.Certificate
}

// issue makes a certificate from template, signed by parent (self-signed when parent is nil).
func issue(template *x509.Certificate, parent *issued) *issued {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	Expect(err).NotTo(HaveOccurred())
	template.SerialNumber = big.NewInt(time.Now().UnixNano())
	template.NotBefore, template.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	signer, signerKey := template, key
	if parent != nil {
		signer, signerKey = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, template, signer, &key.PublicKey, signerKey)
	Expect(err).NotTo(HaveOccurred())
	out := &issued{key: key}
	out.cert, err = x509.ParseCertificate(der)
	Expect(err).NotTo(HaveOccurred())
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	Expect(err).NotTo(HaveOccurred())
	out.certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	out.keyPEM = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	out.keyPair, err = tls.X509KeyPair(out.certPEM, out.keyPEM)
	Expect(err).NotTo(HaveOccurred())
	return out
}

func certificateAuthority(name string) *issued {
	return issue(&x509.Certificate{Subject: pkix.Name{CommonName: name}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}, nil)
}

// mutualTLSServer is a loopback HTTPS server that demands a client certificate from clientCA and
// answers with the client certificate's common name.
func mutualTLSServer(serverCA, clientCA *issued) *httptest.Server {
	serverCert := issue(&x509.Certificate{Subject: pkix.Name{CommonName: "127.0.0.1"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}, serverCA)
	clients := x509.NewCertPool()
	clients.AddCert(clientCA.cert)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"client": r.TLS.PeerCertificates[0].Subject.CommonName})
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{serverCert.keyPair}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clients, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	return srv
}

var _ = Describe("HTTP steps over TLS", func() {
	ctx := context.Background()

	It("trusts the CA bundle it names, presents its client certificate, and never skips verification", func() {
		ns := newNamespace(ctx)
		serverCA, clientCA := certificateAuthority("api-ca"), certificateAuthority("client-ca")
		clientCert := issue(&x509.Certificate{Subject: pkix.Name{CommonName: "teardown-operator-test"},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature}, clientCA)
		srv := mutualTLSServer(serverCA, clientCA)
		DeferCleanup(srv.Close)

		Expect(k8s.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "api-ca"},
			Data: map[string]string{"ca.crt": string(serverCA.certPEM)}})).To(Succeed())
		Expect(k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "client-cert"}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{corev1.TLSCertKey: clientCert.certPEM, corev1.TLSPrivateKeyKey: clientCert.keyPEM}})).To(Succeed())

		caRef := &v1alpha1.CABundleSource{ConfigMapKeyRef: &v1alpha1.ConfigMapKeyRef{Name: "api-ca", Key: "ca.crt", Namespace: "${object.metadata.namespace}"}}
		certRef := &v1alpha1.ClientCertificateRef{SecretName: "client-cert", Namespace: "${object.metadata.namespace}"}
		continuing := func(s v1alpha1.Step) v1alpha1.Step { s.OnFailure = v1alpha1.OnFailureContinue; return s }
		cp := framework.ClusterPolicy("tls-"+ns, "tls", ns,
			continuing(httpStep("system-roots", v1alpha1.HTTPStep{URL: srv.URL + "/"})),
			continuing(httpStep("no-client-cert", v1alpha1.HTTPStep{URL: srv.URL + "/", TLS: &v1alpha1.HTTPTLS{CA: caRef}})),
			httpStep("mutual", v1alpha1.HTTPStep{URL: srv.URL + "/", TLS: &v1alpha1.HTTPTLS{CA: caRef, ClientCertificate: certRef},
				Outputs: map[string]v1alpha1.Expression{"client": "response.body.client"}}),
		)
		Expect(k8s.Create(ctx, cp)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8s.Delete(ctx, cp))).To(Succeed()) })
		expectReady(ctx, cp, metav1.ConditionTrue)
		cm := configMap(ns, "target", map[string]string{"app": "tls"})
		Expect(k8s.Create(ctx, cm)).To(Succeed())
		Eventually(finalizers(ctx, cm), 10*time.Second).Should(ContainElement("clusterteardownpolicy.teardown.dev/" + cp.Name))
		Expect(k8s.Delete(ctx, cm)).To(Succeed())
		Eventually(gone(ctx, cm), 15*time.Second).Should(BeTrue())

		roots := stepOf(ctx, cm, "system-roots")
		Expect(roots.Phase).To(Equal(v1alpha1.StepFailed))
		Expect(roots.Attempts).To(Equal(int32(1)), "an untrusted certificate is not retried")
		Expect(roots.Message).To(ContainSubstring("certificate signed by unknown authority"))
		noCert := stepOf(ctx, cm, "no-client-cert")
		Expect(noCert.Phase).To(Equal(v1alpha1.StepFailed))
		Expect(noCert.Message).To(ContainSubstring("certificate"))
		mutual := stepOf(ctx, cm, "mutual")
		Expect(mutual.Phase).To(Equal(v1alpha1.StepSucceeded), mutual.Message)
		Expect(string(mutual.Outputs["client"].Raw)).To(Equal(`"teardown-operator-test"`))
	})
})
