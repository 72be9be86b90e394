"""Downloads: HTTP with resume, retries and checksums, the Hugging Face Hub, sizes of remote files."""
