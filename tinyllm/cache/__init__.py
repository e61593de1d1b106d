"""Key/value storage for attention: contiguous, latent (MLA) and paged caches."""
