//go:build !strict

package execution

const strictBuild = false
