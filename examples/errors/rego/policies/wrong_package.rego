package lush.authz

allow := true
