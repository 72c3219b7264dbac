-- Producers of the version before delivery_status bind the status as text.
-- An assignment cast lets them keep recording events while the fleet is
-- upgraded (a value outside the enum is still refused by the enum's input).
CREATE CAST (text AS delivery_status) WITH INOUT AS ASSIGNMENT;
