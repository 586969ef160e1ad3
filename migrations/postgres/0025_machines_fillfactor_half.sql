-- +goose Up
-- A change bumps every machine of a module in one transaction, so every
-- row of a page is updated at once, and an in-place (HOT) update needs
-- room on its own page for the row's new version while the old one is
-- still visible to others. At 70 (0006) only some of a page's rows found
-- room and the rest moved to new pages with new index entries; at 50 a
-- page holds each of its rows twice. Pages already full get the room as
-- their rows move.
ALTER TABLE machines SET (fillfactor = 50);

-- +goose Down
ALTER TABLE machines SET (fillfactor = 70);
