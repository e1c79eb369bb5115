package authz

// RandomInput exposes the random input generator to the external tests.
var RandomInput = randomInput
