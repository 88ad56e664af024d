package loadgen

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
)

// Synthetic identifiers and names. They only have to look like the real
// thing to the code under test: IBANs carry a valid mod-97 checksum (the
// ingest side refuses others), phone numbers an international prefix.

var (
	firstNames = []string{"Anna", "Ben", "Clara", "David", "Elif", "Finn", "Greta", "Hamid", "Ida", "Jonas",
		"Katarzyna", "Luca", "Mia", "Noah", "Olga", "Paul", "Quentin", "Rosa", "Sven", "Tereza", "Umut", "Vera",
		"Wiebke", "Xaver", "Yasmin", "Zoe"}
	lastNames = []string{"Müller", "Schmidt", "Schneider", "Fischer", "Weber", "Meyer", "Wagner", "Becker",
		"Schulz", "Hoffmann", "Dubois", "Martin", "Rossi", "Bianchi", "García", "López", "de Vries", "Jansen",
		"Nowak", "Kowalski", "O'Neil", "Smith", "Yılmaz", "Novák"}
	companyKinds = []string{"GmbH", "AG", "SARL", "B.V.", "S.p.A.", "Ltd", "e.K.", "KG"}
	companyWords = []string{"Hausverwaltung", "Stadtwerke", "Versicherung", "Autohaus", "Zahnarztpraxis",
		"Immobilien", "Logistik", "Bäckerei", "Elektro", "Reisebüro", "Energie", "Telekom", "Verlag"}
	merchants = []string{"REWE", "Lidl", "ALDI", "Edeka", "dm-drogerie", "Rossmann", "Shell", "Aral",
		"IKEA", "MediaMarkt", "Zalando", "Amazon Marketplace", "Deutsche Bahn", "Lieferando", "Spotify",
		"Netflix", "Uber", "Starbucks", "McDonald's", "H&M"}
	cities = []string{"Berlin", "Hamburg", "München", "Köln", "Frankfurt", "Stuttgart", "Leipzig", "Dresden",
		"Paris", "Amsterdam", "Wien", "Zürich", "Milano", "Madrid"}
	bankCodes = []string{"10010010", "10070000", "20050550", "37040044", "50010517", "60050101", "70020270",
		"76026000", "12030000", "43060967"}
)

func personName(r *rand.Rand) string {
	return pick(r, firstNames) + " " + pick(r, lastNames)
}

// partyName is a person or, a third of the time, a company.
func partyName(r *rand.Rand) string {
	if r.IntN(3) == 0 {
		return pick(r, companyWords) + " " + pick(r, lastNames) + " " + pick(r, companyKinds)
	}
	return personName(r)
}

// merchantName is a store of a chain; j makes the stores of a workspace's
// pool distinct, so each is its own counterparty by name.
func merchantName(r *rand.Rand, j int) string {
	return fmt.Sprintf("%s %s %d", pick(r, merchants), pick(r, cities), 100+j)
}

func digits(r *rand.Rand, n int) string {
	var b strings.Builder
	for range n {
		b.WriteByte(byte('0' + r.IntN(10)))
	}
	return b.String()
}

func letters(r *rand.Rand, n int) string {
	var b strings.Builder
	for range n {
		b.WriteByte(byte('A' + r.IntN(26)))
	}
	return b.String()
}

// domesticIBAN is a German IBAN: bank code and ten-digit account number.
func domesticIBAN(r *rand.Rand) string {
	return iban("DE", pick(r, bankCodes)+digits(r, 10))
}

// foreignOrDomesticIBAN is mostly German, sometimes Dutch, French or
// British, printed in groups of four as people type them.
func foreignOrDomesticIBAN(r *rand.Rand) string {
	var s string
	switch r.IntN(10) {
	case 0:
		s = iban("NL", letters(r, 4)+digits(r, 10))
	case 1:
		s = iban("FR", digits(r, 23))
	case 2:
		s = iban("GB", letters(r, 4)+digits(r, 14))
	default:
		s = domesticIBAN(r)
	}
	var b strings.Builder
	for i := 0; i < len(s); i += 4 {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(s[i:min(i+4, len(s))])
	}
	return b.String()
}

// iban computes the ISO 13616 check digits of country and bban.
func iban(country, bban string) string {
	rem := 0
	for _, c := range bban + country + "00" {
		switch {
		case c >= '0' && c <= '9':
			rem = (rem*10 + int(c-'0')) % 97
		default:
			rem = (rem*100 + int(c-'A') + 10) % 97
		}
	}
	check := 98 - rem
	return country + fmt.Sprintf("%02d", check) + bban
}

// sortCodeAccount is a domestic account number as a British sort code and
// account number ("12-34-56 12345678").
func sortCodeAccount(r *rand.Rand) string {
	return digits(r, 2) + "-" + digits(r, 2) + "-" + digits(r, 2) + " " + digits(r, 8)
}

// mobileNumber is a German, Austrian or Dutch mobile number with its
// international prefix.
func mobileNumber(r *rand.Rand) string {
	switch r.IntN(4) {
	case 0:
		return "+43 664 " + digits(r, 7)
	case 1:
		return "+31 6 " + digits(r, 8)
	default:
		return "+49 15" + strconv.Itoa(1+r.IntN(9)) + " " + digits(r, 7)
	}
}
