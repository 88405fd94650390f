-- hookrelay: runs beside older releases
-- 0018: reserved for a change being made beside this one (the number is taken);
-- it changes nothing here and is replaced by that change's own file when it lands.
SELECT 1;
