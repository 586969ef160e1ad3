// Command image builds the mesh controller's container image without a
// container daemon (go-containerregistry): the static binary on an empty
// base, a user that is not root, written as an OCI image layout tarball.
// `task release` runs it for each architecture:
//
//	go run ./dist/image --binary bin/linux_amd64/mesh-controller --arch amd64 --version 1.4.2 --out mesh-controller_1.4.2_linux_amd64.oci.tar
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	var o Options
	var binary, out string
	flag.StringVar(&binary, "binary", "", "the static linux mesh-controller binary")
	flag.StringVar(&o.Arch, "arch", "amd64", "its architecture (amd64, arm64)")
	flag.StringVar(&o.Version, "version", "dev", "the version, the image's tag")
	flag.StringVar(&out, "out", "", "the OCI tarball to write")
	flag.Parse()
	if binary == "" || out == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: image --binary FILE --arch ARCH --version V --out FILE.oci.tar")
		os.Exit(2)
	}
	if err := run(o, binary, out); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(o Options, binary, out string) error {
	var err error
	if o.Binary, err = os.ReadFile(binary); err != nil {
		return err
	}
	img, err := Build(o)
	if err != nil {
		return err
	}
	if err := WriteOCITar(img, "mesh-controller:"+o.Version, out); err != nil {
		return err
	}
	d, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s: mesh-controller:%s linux/%s %s\n", out, o.Version, o.Arch, d)
	return nil
}
