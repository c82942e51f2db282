-- sbworker on SQL Server, optional script (run by hand after the numbered ones): the
-- Vraag message type validated as VALID_XML against the XSDs of schemas/, in one XML
-- SCHEMA COLLECTION named with a hash of the XSDs. Running a newer version of this
-- script creates the new collection, moves the message type to it and drops the old
-- one, in one transaction, with the queues running. The Antwoord and the Fout stay
-- WELL_FORMED_XML: the collector validates them in code, where a failure is recorded;
-- a VALID_XML failure there would be discarded at the data queue, and its error sent
-- to the calculation side, which has ended its endpoint already.
-- Generated from schemas/ by sbworker::broker::mssql::schema_collection_script: do not
-- edit; a test fails when it is not current (SBWORKER_WRITE_GENERATED=1 rewrites it).

:on error exit
SET ANSI_NULLS ON;
SET ANSI_PADDING ON;
SET ANSI_WARNINGS ON;
SET ARITHABORT ON;
SET CONCAT_NULL_YIELDS_NULL ON;
SET QUOTED_IDENTIFIER ON;
SET NUMERIC_ROUNDABORT OFF;
GO
USE [$(Database)];
GO

IF NOT EXISTS (SELECT 1 FROM sys.xml_schema_collections
               WHERE name = N'LoonfactorBerekening_399f0fbbfb6e69ae' AND schema_id = SCHEMA_ID(N'Rekenserver'))
    CREATE XML SCHEMA COLLECTION Rekenserver.LoonfactorBerekening_399f0fbbfb6e69ae AS N'<!--
  LoonfactorBerekeningVraag: the calculation request a roster trigger sends to the
  calculation service (one dienstverband, one salary period, its shifts).

  All type names carry the prefix "Vraag" so that this schema, the Antwoord schema and
  the Fout schema can live side by side in one SQL Server XML SCHEMA COLLECTION
  (they share one target namespace).
-->
<xs:schema xmlns:xs="http://www.w3.org/2001/XMLSchema"
           xmlns="http://www.sdbgroep.nl/MPlus/Rekenserver/2008"
           targetNamespace="http://www.sdbgroep.nl/MPlus/Rekenserver/2008"
           elementFormDefault="qualified"
           attributeFormDefault="unqualified">

  <xs:simpleType name="VraagUuid">
    <xs:restriction base="xs:string">
      <xs:pattern value="[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}"/>
    </xs:restriction>
  </xs:simpleType>

  <!-- Local wall-clock time hh:mm, 00:00 to 23:59 (Europe/Amsterdam). -->
  <xs:simpleType name="VraagKloktijd">
    <xs:restriction base="xs:string">
      <xs:pattern value="([01][0-9]|2[0-3]):[0-5][0-9]"/>
    </xs:restriction>
  </xs:simpleType>

  <!-- A plain calendar date yyyy-mm-dd, no time zone. -->
  <xs:simpleType name="VraagDatum">
    <xs:restriction base="xs:date">
      <xs:pattern value="\d{4}-\d{2}-\d{2}"/>
    </xs:restriction>
  </xs:simpleType>

  <!-- Roster version of one (dienstverband, periode): only grows. Fits a SQL bigint. -->
  <xs:simpleType name="VraagVersie">
    <xs:restriction base="xs:long">
      <xs:minInclusive value="0"/>
    </xs:restriction>
  </xs:simpleType>

  <xs:simpleType name="VraagId">
    <xs:restriction base="xs:int"/>
  </xs:simpleType>

  <!-- 0/1 as SQL Server writes a bit; true/false also accepted. -->
  <xs:simpleType name="VraagBit">
    <xs:restriction base="xs:boolean"/>
  </xs:simpleType>

  <!-- Hours or days: up to 168, two decimals (SQL decimal(9,4) values also fit). -->
  <xs:simpleType name="VraagUren">
    <xs:restriction base="xs:decimal">
      <xs:minInclusive value="0"/>
      <xs:maxInclusive value="168"/>
      <xs:fractionDigits value="4"/>
    </xs:restriction>
  </xs:simpleType>

  <!-- Money in euro, as SQL money / decimal(19,4). -->
  <xs:simpleType name="VraagBedrag">
    <xs:restriction base="xs:decimal">
      <xs:minInclusive value="0"/>
      <xs:maxInclusive value="1000000000"/>
      <xs:fractionDigits value="4"/>
    </xs:restriction>
  </xs:simpleType>

  <xs:simpleType name="VraagCode">
    <xs:restriction base="xs:token">
      <xs:minLength value="1"/>
      <xs:maxLength value="20"/>
    </xs:restriction>
  </xs:simpleType>

  <xs:simpleType name="VraagNaam">
    <xs:restriction base="xs:string">
      <xs:maxLength value="100"/>
    </xs:restriction>
  </xs:simpleType>

  <xs:simpleType name="VraagFunctiegroep">
    <xs:restriction base="xs:int">
      <xs:minInclusive value="0"/>
      <xs:maxInclusive value="999"/>
    </xs:restriction>
  </xs:simpleType>

  <xs:complexType name="VraagCao">
    <xs:sequence>
      <xs:element name="Code" type="VraagCode"/>
      <xs:element name="IsVierWeken" type="VraagBit"/>
      <xs:element name="Naam" type="VraagNaam"/>
      <xs:element name="WerkweekUren" type="VraagUren"/>
    </xs:sequence>
    <xs:attribute name="Id" type="VraagId" use="required"/>
  </xs:complexType>

  <xs:complexType name="VraagSalaris">
    <xs:sequence>
      <!-- Full-time monthly salary (engine decision: the salary is the full-time amount). -->
      <xs:element name="NominaalSalaris" type="VraagBedrag"/>
    </xs:sequence>
    <xs:attribute name="GarantieToeslag" type="VraagBedrag" use="optional"/>
    <xs:attribute name="GarantieTredeBedrag" type="VraagBedrag" use="optional"/>
    <xs:attribute name="LoonToeslag" type="VraagBedrag" use="optional"/>
  </xs:complexType>

  <xs:complexType name="VraagDienstverband">
    <xs:sequence>
      <xs:element name="Cao" type="VraagCao"/>
      <xs:element name="DagenPerWeek" type="VraagUren"/>
      <xs:element name="DatumInDienst" type="VraagDatum"/>
      <xs:element name="DatumUitDienst" type="VraagDatum" minOccurs="0"/>
      <xs:element name="ParttimeUren" type="VraagUren"/>
      <!-- Optional in the contract: the engine answers a Fout when ORT is due without it. -->
      <xs:element name="Salaris" type="VraagSalaris" minOccurs="0"/>
      <xs:element name="Soort" type="VraagCode"/>
      <xs:element name="Functiegroep" type="VraagFunctiegroep"/>
    </xs:sequence>
    <xs:attribute name="Id" type="VraagId" use="required"/>
  </xs:complexType>

  <xs:complexType name="VraagPeriode">
    <xs:sequence>
      <xs:element name="Begin" type="VraagDatum"/>
      <!-- Inclusive: the last day of the period. -->
      <xs:element name="Einde" type="VraagDatum"/>
    </xs:sequence>
    <xs:attribute name="Id" type="VraagId" use="required"/>
  </xs:complexType>

  <xs:complexType name="VraagDienstType">
    <xs:attribute name="Code" type="VraagCode" use="required"/>
    <xs:attribute name="TeltMeeInGewerkteUren" type="VraagBit" use="required"/>
  </xs:complexType>

  <!-- A block whose Einde is not after its Begin ends on the next day. -->
  <!-- Leave taken on a block''s rostered hours: statutory vacation (wettelijk), the rest
       of the vacation hours (bovenwettelijk), other paid leave (overig). -->
  <xs:simpleType name="VraagVerlof">
    <xs:restriction base="xs:string">
      <xs:enumeration value="Wettelijk"/>
      <xs:enumeration value="Bovenwettelijk"/>
      <xs:enumeration value="Overig"/>
    </xs:restriction>
  </xs:simpleType>

  <xs:complexType name="VraagTijdblok">
    <xs:sequence>
      <xs:element name="DienstType" type="VraagDienstType"/>
    </xs:sequence>
    <xs:attribute name="Begin" type="VraagKloktijd" use="required"/>
    <xs:attribute name="Einde" type="VraagKloktijd" use="required"/>
    <xs:attribute name="IsZiek" type="VraagBit" use="required"/>
    <!-- Absent: worked (or sick, with IsZiek="1"). Leave is not sick: IsZiek="0". -->
    <xs:attribute name="Verlof" type="VraagVerlof" use="optional"/>
  </xs:complexType>

  <!-- A stored wage factor of an earlier period (as an Antwoord gave it). -->
  <xs:simpleType name="VraagFactorWaarde">
    <xs:restriction base="xs:decimal">
      <xs:minInclusive value="-1000000000"/>
      <xs:maxInclusive value="1000000000"/>
      <xs:fractionDigits value="4"/>
    </xs:restriction>
  </xs:simpleType>

  <xs:complexType name="VraagHistorieFactor">
    <xs:attribute name="Code" type="VraagCode" use="required"/>
    <xs:attribute name="Waarde" type="VraagFactorWaarde" use="required"/>
  </xs:complexType>

  <xs:complexType name="VraagHistoriePeriode">
    <xs:sequence>
      <xs:element name="Factor" type="VraagHistorieFactor" minOccurs="0" maxOccurs="unbounded"/>
    </xs:sequence>
    <xs:attribute name="Id" type="VraagId" use="required"/>
    <xs:attribute name="Begin" type="VraagDatum" use="required"/>
    <xs:attribute name="Einde" type="VraagDatum" use="required"/>
  </xs:complexType>

  <!-- The stored results of the employment''s earlier periods that the CAO''s averages
       need (ORT during statutory vacation: the past six months, and the calendar year
       for its maximum), added by the sender from the stored results. -->
  <xs:complexType name="VraagHistorie">
    <xs:sequence>
      <xs:element name="Periode" type="VraagHistoriePeriode" minOccurs="0" maxOccurs="unbounded"/>
    </xs:sequence>
  </xs:complexType>

  <xs:complexType name="VraagDienst">
    <xs:sequence>
      <xs:element name="Tijdblok" type="VraagTijdblok" maxOccurs="unbounded"/>
    </xs:sequence>
    <xs:attribute name="Datum" type="VraagDatum" use="required"/>
  </xs:complexType>

  <xs:complexType name="VraagDiensten">
    <xs:sequence>
      <xs:element name="Dienst" type="VraagDienst" minOccurs="0" maxOccurs="unbounded"/>
    </xs:sequence>
  </xs:complexType>

  <xs:element name="LoonfactorBerekeningVraag">
    <xs:complexType>
      <xs:sequence>
        <xs:element name="Dienstverband" type="VraagDienstverband"/>
        <xs:element name="Periode" type="VraagPeriode"/>
        <xs:element name="Diensten" type="VraagDiensten"/>
        <xs:element name="Historie" type="VraagHistorie" minOccurs="0"/>
      </xs:sequence>
      <xs:attribute name="Id" type="VraagUuid" use="required"/>
      <xs:attribute name="Timestamp" type="xs:dateTime" use="required"/>
      <xs:attribute name="Versie" type="VraagVersie" use="required"/>
      <!-- The contract version the sender wrote (2 since Historie and Verlof; absent
           before). A worker that knows an earlier one refuses the Vraag as newer-contract. -->
      <xs:attribute name="ContractVersie" type="xs:positiveInteger" use="optional"/>
    </xs:complexType>
  </xs:element>
</xs:schema>
<!--
  LoonfactorBerekeningAntwoord: the calculation service''s answer to one Vraag.
  Id, Timestamp and Versie echo the Vraag, so a receiver can tell which roster state
  the answer belongs to; DienstverbandId and PeriodeId name the key even when the
  answer holds no rows. Type names carry the prefix "Antwoord" (see the Vraag schema).
-->
<xs:schema xmlns:xs="http://www.w3.org/2001/XMLSchema"
           xmlns="http://www.sdbgroep.nl/MPlus/Rekenserver/2008"
           xmlns:r="http://www.sdbgroep.nl/MPlus/Rekenserver/2008"
           targetNamespace="http://www.sdbgroep.nl/MPlus/Rekenserver/2008"
           elementFormDefault="qualified"
           attributeFormDefault="unqualified">

  <xs:simpleType name="AntwoordUuid">
    <xs:restriction base="xs:string">
      <xs:pattern value="[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}"/>
    </xs:restriction>
  </xs:simpleType>

  <xs:simpleType name="AntwoordVersie">
    <xs:restriction base="xs:long">
      <xs:minInclusive value="0"/>
    </xs:restriction>
  </xs:simpleType>

  <!-- Wage factor code: three digits, as Listing 12 of the original reads varchar(3). -->
  <xs:simpleType name="AntwoordLoonfactorCode">
    <xs:restriction base="xs:string">
      <xs:pattern value="[0-9]{3}"/>
    </xs:restriction>
  </xs:simpleType>

  <!-- Fits SQL numeric(9,2). -->
  <xs:simpleType name="AntwoordWaarde">
    <xs:restriction base="xs:decimal">
      <xs:totalDigits value="9"/>
      <xs:fractionDigits value="2"/>
    </xs:restriction>
  </xs:simpleType>

  <xs:simpleType name="AntwoordWaarschuwingCode">
    <xs:restriction base="xs:token">
      <xs:pattern value="[a-z][a-z0-9\-]{0,63}"/>
    </xs:restriction>
  </xs:simpleType>

  <xs:complexType name="AntwoordVariabeleMutatie">
    <xs:sequence>
      <xs:element name="DienstverbandId" type="xs:int"/>
      <xs:element name="KaartSoort" type="xs:int"/>
      <xs:element name="LoonfactorCode" type="AntwoordLoonfactorCode"/>
      <xs:element name="PeriodeId" type="xs:int"/>
      <xs:element name="Waarde" type="AntwoordWaarde"/>
      <xs:element name="KostenPlaatsId" type="xs:int" minOccurs="0"/>
      <xs:element name="KostenSoortId" type="xs:int" minOccurs="0"/>
    </xs:sequence>
  </xs:complexType>

  <!-- A warning about the input the engine worked around (text: for people). -->
  <xs:complexType name="AntwoordWaarschuwing">
    <xs:simpleContent>
      <xs:extension base="xs:string">
        <xs:attribute name="Code" type="AntwoordWaarschuwingCode" use="required"/>
        <xs:attribute name="Datum" type="xs:date" use="optional"/>
      </xs:extension>
    </xs:simpleContent>
  </xs:complexType>

  <xs:element name="LoonfactorBerekeningAntwoord">
    <xs:complexType>
      <xs:sequence>
        <xs:element name="VariabeleMutatie" type="AntwoordVariabeleMutatie"
                    minOccurs="0" maxOccurs="unbounded"/>
        <xs:element name="Waarschuwing" type="AntwoordWaarschuwing"
                    minOccurs="0" maxOccurs="unbounded"/>
      </xs:sequence>
      <xs:attribute name="Id" type="AntwoordUuid" use="required"/>
      <xs:attribute name="Timestamp" type="xs:dateTime" use="required"/>
      <xs:attribute name="Versie" type="AntwoordVersie" use="required"/>
      <xs:attribute name="DienstverbandId" type="xs:int" use="required"/>
      <xs:attribute name="PeriodeId" type="xs:int" use="required"/>
      <!-- What computed it: the engine''s version and its rate tables'' fingerprint (kept
           with the stored result, for explaining it later). -->
      <xs:attribute name="Rekenversie" use="optional">
        <xs:simpleType>
          <xs:restriction base="xs:string">
            <xs:minLength value="1"/>
            <xs:maxLength value="200"/>
          </xs:restriction>
        </xs:simpleType>
      </xs:attribute>
    </xs:complexType>
    <!-- Each wage factor code once: the stored result holds one value per code. -->
    <!-- xs:unique left out: SQL Server cannot register identity constraints -->
  </xs:element>
</xs:schema>
<!--
  RekenserverFout: the error answer, shaped as the original''s CATCH block wrote it
  (ERROR_NUMBER() … ERROR_MESSAGE(), as the original system''s error handler does), plus the Vraag''s Id when it
  could be read and a stable machine-readable reason code (Reden). Type names carry
  the prefix "Fout" (see the Vraag schema).
-->
<xs:schema xmlns:xs="http://www.w3.org/2001/XMLSchema"
           xmlns="http://www.sdbgroep.nl/MPlus/Rekenserver/2008"
           targetNamespace="http://www.sdbgroep.nl/MPlus/Rekenserver/2008"
           elementFormDefault="qualified"
           attributeFormDefault="unqualified">

  <xs:simpleType name="FoutUuid">
    <xs:restriction base="xs:string">
      <xs:pattern value="[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}"/>
    </xs:restriction>
  </xs:simpleType>

  <!-- The reason codes; docs/contract.md lists what each means. -->
  <xs:simpleType name="FoutReden">
    <xs:restriction base="xs:token">
      <xs:enumeration value="body-too-large"/>
      <xs:enumeration value="bad-encoding"/>
      <xs:enumeration value="malformed-xml"/>
      <xs:enumeration value="doctype-forbidden"/>
      <xs:enumeration value="too-deep"/>
      <xs:enumeration value="wrong-root"/>
      <xs:enumeration value="wrong-namespace"/>
      <xs:enumeration value="unexpected-element"/>
      <xs:enumeration value="unexpected-attribute"/>
      <xs:enumeration value="missing-element"/>
      <xs:enumeration value="missing-attribute"/>
      <xs:enumeration value="invalid-value"/>
      <xs:enumeration value="period-inverted"/>
      <xs:enumeration value="block-too-long"/>
      <xs:enumeration value="salary-missing"/>
      <xs:enumeration value="unknown-cao"/>
      <xs:enumeration value="internal"/>
      <xs:enumeration value="newer-contract"/>
    </xs:restriction>
  </xs:simpleType>

  <xs:element name="RekenserverFout">
    <xs:complexType>
      <xs:sequence>
        <xs:element name="ErrorNumber" type="xs:int"/>
        <xs:element name="ErrorSeverity" type="xs:int"/>
        <xs:element name="ErrorState" type="xs:int"/>
        <xs:element name="ErrorProcedure" type="xs:string"/>
        <!-- Line of the offending input where known, else 0. -->
        <xs:element name="ErrorLine" type="xs:int"/>
        <xs:element name="ErrorMessage" type="xs:string"/>
        <xs:element name="VraagId" type="FoutUuid" minOccurs="0"/>
        <xs:element name="Reden" type="FoutReden"/>
      </xs:sequence>
    </xs:complexType>
  </xs:element>
</xs:schema>';
GO

SET XACT_ABORT ON;
BEGIN TRANSACTION;
ALTER MESSAGE TYPE [/Rekenserver/LoonfactorBerekening/Vraag] VALIDATION = VALID_XML WITH SCHEMA COLLECTION Rekenserver.LoonfactorBerekening_399f0fbbfb6e69ae;
ALTER MESSAGE TYPE [/Rekenserver/LoonfactorBerekening/Antwoord] VALIDATION = WELL_FORMED_XML;
ALTER MESSAGE TYPE [/Rekenserver/Fout] VALIDATION = WELL_FORMED_XML;
-- Earlier versions' collections, now referenced by no message type.
DECLARE @old sysname, @drop nvarchar(400);
DECLARE old_collections CURSOR LOCAL STATIC READ_ONLY FOR
    SELECT c.name FROM sys.xml_schema_collections c
     WHERE c.schema_id = SCHEMA_ID(N'Rekenserver') AND c.name <> N'LoonfactorBerekening_399f0fbbfb6e69ae'
       AND (c.name = N'LoonfactorBerekening' OR c.name LIKE N'LoonfactorBerekening[_]________________')
       AND NOT EXISTS (SELECT 1 FROM sys.service_message_types t WHERE t.xml_collection_id = c.xml_collection_id)
       AND NOT EXISTS (SELECT 1 FROM sys.columns k WHERE k.xml_collection_id = c.xml_collection_id)
       AND NOT EXISTS (SELECT 1 FROM sys.parameters k WHERE k.xml_collection_id = c.xml_collection_id);
OPEN old_collections;
FETCH NEXT FROM old_collections INTO @old;
WHILE @@FETCH_STATUS = 0
BEGIN
    SET @drop = N'DROP XML SCHEMA COLLECTION Rekenserver.' + QUOTENAME(@old) + N';';
    EXEC sys.sp_executesql @drop;
    FETCH NEXT FROM old_collections INTO @old;
END
CLOSE old_collections; DEALLOCATE old_collections;
COMMIT TRANSACTION;
GO
