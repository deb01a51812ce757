"""Software images: their definitions (images/*.toml), machine images
per cloud region, the tree manifest and its replication to directors."""
