DROP CAST (text AS delivery_status);
