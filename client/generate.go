// Package client is a Go client of the controller's API, generated from
// openapi.yaml by oapi-codegen (types and client, its default options):
// one method per operation, named from its operationId
// (ListMachinesWithResponse, …). Never edit client.gen.go; change the spec
// and run `go tool task generate`.
package client

//go:generate go tool oapi-codegen -generate types,client -package client -o client.gen.go ../openapi.yaml
