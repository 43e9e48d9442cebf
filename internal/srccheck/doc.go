// SPDX-License-Identifier: Apache-2.0

// Package srccheck holds tests over the repository's own sources: rules a compiler cannot check
// and a reviewer misses, each written down with the bug it keeps out.
package srccheck
