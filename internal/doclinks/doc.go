// SPDX-License-Identifier: Apache-2.0

// Package doclinks checks the links of the repository's Markdown: every relative link names a
// file or folder that exists, every #anchor a heading of the page it points to (GitHub's slug
// rules), and every external link is a well-formed http(s) or mailto address. Nothing is
// fetched: the check runs without network or root, in `make test`.
package doclinks
