-- Checkpoints (promotion-type early stopping). An SQLite store keeps them in
-- files beside the database (server/store/artifact_store.h: files:DIR), so
-- this version adds nothing here; it exists so that both dialects count
-- their schema versions alike.
SELECT 1;
