"""Handle-based tools over the store and over large blobs (BlobRef, ctx_*, mem_*).

Empty until the tools issue lands: the package exists so the layout and namespace are
fixed from the first release.
"""
